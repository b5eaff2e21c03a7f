"""Wire protocols, spoken by the gateway, the simulator and (v1) the API client alike: CaptchaAI's v1
(:mod:`.v1`, ``in.php`` / ``res.php``) and the JSON API of the ``createTask`` family
(Anti-Captcha, 2captcha v2, CapMonster Cloud, CapSolver).

* :mod:`.v1` — CaptchaAI's ``in.php`` / ``res.php``: reading requests (any bytes) and writing replies.
* :mod:`.v1_client` — reading those replies back (the API client's decoding).

* :mod:`.jsonapi_errors` — the JSON API's numbered errors, and the one mapping from this package's codes to them.
* :mod:`.jsonapi_tasks` — task types: a ``task`` object -> the queue's method and params; answers -> ``solution``.
* :mod:`.jsonapi` — reading a request body (any bytes) and writing the replies.
"""
