"""Real CaptchaAI client libraries against the simulator (compat.py; python_clients.py runs in their venv)."""
