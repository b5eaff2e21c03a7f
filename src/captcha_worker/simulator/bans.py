"""IP bans: requests with a wrong key from one client IP within a sliding window, and the bans they cause
(CaptchaAI's ``IP_BANNED``, lifted after ``ban_seconds``)."""

from __future__ import annotations

from collections import deque

from captcha_worker.simulator.config import SimConfig


class BanList:
    """Bad-key strikes per client IP within a sliding window, and the bans they caused."""

    def __init__(self) -> None:
        self._strikes: dict[str, deque[float]] = {}
        self._until: dict[str, float] = {}

    def banned(self, ip: str, now: float) -> bool:
        until = self._until.get(ip)
        if until is not None and until <= now:
            del self._until[ip]
            return False
        return until is not None

    def strike(self, ip: str, now: float, cfg: SimConfig) -> bool:
        """Records a bad-key request; True when it bans the IP."""
        if cfg.ban_after <= 0:
            return False
        strikes = self._strikes.setdefault(ip, deque())
        strikes.append(now)
        while strikes and strikes[0] <= now - cfg.ban_window_seconds:
            strikes.popleft()
        if len(strikes) < cfg.ban_after:
            return False
        del self._strikes[ip]
        self._until[ip] = now + cfg.ban_seconds
        return True

    def prune(self, now: float, window: float) -> None:
        for ip in [ip for ip, s in self._strikes.items() if not s or s[-1] <= now - window]:
            del self._strikes[ip]
        for ip in [ip for ip, until in self._until.items() if until <= now]:
            del self._until[ip]
