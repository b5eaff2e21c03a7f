"""Wire protocols besides CaptchaAI's v1 (``simulator.protocol``): the JSON API of the ``createTask`` family
(Anti-Captcha, 2captcha v2, CapMonster Cloud, CapSolver), spoken by the gateway and the simulator alike.

* :mod:`.jsonapi_errors` — the JSON API's numbered errors, and the one mapping from this package's codes to them.
* :mod:`.jsonapi_tasks` — task types: a ``task`` object -> the queue's method and params; answers -> ``solution``.
* :mod:`.jsonapi` — reading a request body (any bytes) and writing the replies.
"""
