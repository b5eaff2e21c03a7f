"""captcha-solver: queue-driven CaptchaAI solving service (worker, producer library, simulator)."""

__version__ = "0.2.0"
