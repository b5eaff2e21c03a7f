"""captcha-solver: queue-driven CaptchaAI solving service (worker, producer library, simulator)."""

__version__ = "0.1.0"
