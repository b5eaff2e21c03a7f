"""The Grafana dashboard as code, its checks and its picture.

* ``panels``: the vocabulary (a row, a stat, a graph, a query) and the PromQL selector every query uses;
* ``captcha_solver``: the dashboard itself, row by row;
* ``build``: turns it into Grafana's JSON model with the grafana-foundation-sdk and writes
  ``charts/captcha-solver/dashboards/captcha-solver.json`` and the panel section of ``docs/metrics.md``;
* ``render``: draws ``docs/img/dashboard.png`` from a real Prometheus scraping a real demo run;
* ``validate/``: a tiny Go program that checks the JSON against Grafana's typed schema (strict).

``python -m dashboards --help`` (``make dashboard``, ``make dashboard-png``).
"""
