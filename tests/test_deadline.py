"""Routing on a deadline (issue 27, policy (c)): the predictor on numbers (``deadline.late``), then real processes
(redis-server, a worker process, the simulator as CaptchaAI with a plan of 2 threads and slow solves, a second one
as a 2captcha provider): in a backlog the tasks whose deadline the plan would miss go to the provider, under the
cap, and the rest wait for CaptchaAI; with routing on a deadline off the same backlog's tight tasks expire."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from captcha_worker.client import CaptchaQueue, Expired, Outcome, Solved, TaskSpec
from captcha_worker.config import ConfigError, providers_from_env
from captcha_worker.deadline import EWMA_WEIGHT, Line, ServiceTimes, Waiting, late, would_miss
from captcha_worker.queue import Keys, RedisQueue
from captcha_worker.spend import Spend
from tests.helpers import task_body
from tests.procs import RedisServer, SimProc, simulator, workers
from tests.test_routing import PKEY, TURNSTILE, _past_an_hours_start, env_of, no_crash

KEYS = Keys("captcha")


def w(i: int, deadline: float | None, service_s: float = 2.0, routable: bool = True) -> Waiting:
    return Waiting(f"t{i}", deadline, service_s, routable)


LINE = Line(threads=2, mean_s=2.0)  # the plan answers one task every 1 s


def test_the_jth_in_line_starts_after_j_plus_one_solves_over_the_threads() -> None:
    assert [LINE.start_after(j) for j in range(4)] == [1.0, 2.0, 3.0, 4.0]
    assert Line(threads=5, mean_s=10.0).start_after(9) == 20.0


def test_tasks_past_what_the_plan_answers_in_time_go_and_the_line_moves_up() -> None:
    # deadline 5 s from now: position j is answered at (j + 1) + 2 s; 0, 1, 2 make it (2 at exactly 5 s), 3 on miss
    waiting = [w(i, 5.0) for i in range(6)]
    assert late(waiting, LINE, now=0.0, room=10) == ["t3", "t4", "t5"]
    assert not would_miss(waiting[2], LINE, 2, now=0.0) and would_miss(waiting[3], LINE, 3, now=0.0)
    # room for one: t3 goes, t4 and t5 stay in line (and still miss: the cap or the providers are full)
    assert late(waiting, LINE, now=0.0, room=1) == ["t3"]


def test_only_the_tight_tasks_go_and_the_loose_ones_behind_them_wait() -> None:
    waiting = [w(0, 60.0), w(1, 60.0), w(2, 60.0), w(3, 60.0), w(4, 5.0), w(5, 5.0), w(6, 60.0), w(7, 60.0)]
    # t4, t5 have 4 ahead: answered at 5 + 2 = 7 > 5; once they leave, t6 and t7 have 4 ahead: 7 s, well in time
    assert late(waiting, LINE, now=0.0, room=10) == ["t4", "t5"]


def test_no_deadline_no_provider_or_no_chance_stays_in_line_and_counts_ahead() -> None:
    waiting = [w(0, None), w(1, None), w(2, None), w(3, 5.0, routable=False), w(4, 1.5), w(5, 6.0)]
    # t3: no provider takes its kind; t4: a provider cannot answer in 2 s what is due in 1.5 s (not paid for);
    # both stay in line: t5 has 5 ahead, answered at 6 + 2 = 8 > 6, and a provider can make it by 2
    assert late(waiting, LINE, now=0.0, room=10) == ["t5"]
    assert late(waiting, LINE, now=0.0, room=0) == []


def test_a_margin_widens_the_prediction() -> None:
    waiting = [w(i, 5.0) for i in range(3)]
    assert late(waiting, LINE, now=0.0, room=10) == []
    assert late(waiting, LINE, now=0.0, room=10, margin_s=0.5) == ["t2"]


def test_service_times_are_the_table_until_observed_then_a_moving_mean() -> None:
    st = ServiceTimes({"turnstile": 0.6})
    assert st.of("turnstile") == 0.6 and st.of("unknown") == 0.0
    st.observe("turnstile", 2.0)
    assert st.of("turnstile") == 2.0
    st.observe("turnstile", 3.0)
    assert st.of("turnstile") == pytest.approx(2.0 + EWMA_WEIGHT * 1.0)


def test_the_switch_defaults_on_and_takes_only_a_boolean() -> None:
    doc = {"providers": [{"name": "twocaptcha", "protocol": "res.php", "url": "http://127.0.0.1:1", "key": PKEY,
                          "kinds": ["turnstile"], "price_per_1000": {"turnstile": 1.45}}], "cap": {"hour": 1, "day": 1}}
    on = providers_from_env({"PROVIDERS": json.dumps(doc)})
    off = providers_from_env({"PROVIDERS": json.dumps({**doc, "on_deadline": False})})
    assert on is not None and on.on_deadline and off is not None and not off.on_deadline
    with pytest.raises(ConfigError, match="on_deadline must be true or false"):
        providers_from_env({"PROVIDERS": json.dumps({**doc, "on_deadline": "yes"})})


# -- CLAIM_LATE and the peek on a real redis-server ------------------------------------------------------------------
async def test_claim_late_takes_named_ids_once_without_units(redis_server: RedisServer, redis: Redis) -> None:
    q = RedisQueue(redis, "captcha")
    await q.push([(f"t{i}", task_body(f"t{i}")) for i in range(6)], ttl=3600)
    peeked = await q.peek_pending(4)
    assert [i for i, _ in peeked] == ["t0", "t1", "t2", "t3"] and all(b and '"turnstile"' in b for _, b in peeked)
    # two workers claim overlapping ids at once: each id is claimed by one of them, the rest stay in line in order
    a, b = await asyncio.gather(q.claim_late(["t1", "t3", "t5"], lease_s=30, worker="wa"),
                                q.claim_late(["t3", "t5", "nosuch"], lease_s=30, worker="wb"))
    got = [c.item for c in a.items] + [c.item for c in b.items]
    assert sorted(got) == ["t1", "t3", "t5"], got
    assert all(c.unit is None and c.body for c in [*a.items, *b.items]), "no plan-thread unit"
    assert await redis.zcard(KEYS.budget) == 0
    assert await redis.lrange(KEYS.pending, 0, -1) == ["t0", "t2", "t4"]
    assert sorted(await redis.lrange(KEYS.processing, 0, -1)) == ["t1", "t3", "t5"]
    assert await redis.zcard(KEYS.leases) == 3


# -- real processes ------------------------------------------------------------------------------------------------
SPEED = 20.0
PLAN_S = 40.0  # model seconds a plan solve takes (2 s real); the provider's: 10 (0.5 s real)
PRICE = 1450  # micro: 1.45 per 1,000
TIGHT_S, LOOSE_S = 5.0, 60.0  # deadlines, real seconds from the submit


def providers(sim: SimProc, *, cap_solves: int, on_deadline: bool) -> str:
    return json.dumps({"providers": [{"name": "twocaptcha", "protocol": "res.php", "url": sim.url, "key": PKEY,
                                      "kinds": ["turnstile"], "price_per_1000": {"turnstile": 1.45}}],
                       "cap": {"hour": cap_solves * PRICE / 1_000_000, "day": 50.0}, "on_deadline": on_deadline})


@pytest.fixture
def sims(tmp_path: Path) -> Iterator[tuple[SimProc, SimProc]]:
    (tmp_path / "plan").mkdir()
    (tmp_path / "paid").mkdir()
    with simulator(tmp_path / "plan", "--threads", "2", "--speed", str(SPEED), "--seed", "1") as plan, \
            simulator(tmp_path / "paid", "--profile", "2captcha", "--threads", "50", "--speed", str(SPEED),
                      "--seed", "2", "--balance", "10") as paid:
        plan.configure(latency={"turnstile": f"{PLAN_S:g}:0"})
        paid.configure(latency={"turnstile": "10:0"})
        yield plan, paid


# The backlog after the two tasks that take the plan's 2 threads: 4 loose, 4 tight, 2 loose. With a plan solve of
# S ~ 2 s (observed by a warm-up) the plan answers one task every ~1 s: the tight ones, 4 ahead of them, would be
# answered at ~5 + 2 = 7 s > 5 s (a margin of ~2 s real, 40 model s); the loose ones at most at ~11 s < 60 s.
LAYOUT = ["L"] * 6 + ["T"] * 4 + ["L"] * 2


async def _run(redis_server: RedisServer, redis: Redis, sims: tuple[SimProc, SimProc], tmp_path: Path, *,
               on_deadline: bool, cap_solves: int) -> tuple[dict[str, Outcome], list[str], list[int]]:
    plan, paid = sims
    env = env_of(redis_server.url, plan, PROVIDERS=providers(paid, cap_solves=cap_solves, on_deadline=on_deadline),
                 CAPTCHAAI_THREADS="2")
    spend, samples, sampling = Spend(redis, "captcha"), [], True
    async with CaptchaQueue(redis) as q:
        with workers(1, env, tmp_path) as procs:
            await _past_an_hours_start(redis)
            warm = [await q.submit("turnstile", TURNSTILE) for _ in range(2)]  # the worker observes S
            warmed = [await q.result(i, timeout=30) for i in warm]
            assert all(isinstance(o, Solved) for o in warmed), warmed

            async def sample() -> None:
                while sampling:
                    samples.append((await spend.state()).hour)
                    await asyncio.sleep(0.05)

            sampler = asyncio.create_task(sample())
            specs = [TaskSpec("turnstile", TURNSTILE, TIGHT_S if k == "T" else LOOSE_S) for k in LAYOUT]
            ids = await q.submit_many(specs)
            out = dict(zip(ids, await asyncio.gather(*(q.result(i, timeout=90) for i in ids)), strict=True))
            sampling = False
            await sampler
            no_crash(procs)
    return out, ids, samples


def _by(out: dict[str, Outcome], ids: list[str], kind: str) -> list[Outcome]:
    return [out[i] for i, k in zip(ids, LAYOUT, strict=True) if k == kind]


@pytest.mark.integration
async def test_tasks_that_would_miss_go_to_the_provider_under_the_cap_the_rest_wait(
        redis_server: RedisServer, redis: Redis, sims: tuple[SimProc, SimProc], tmp_path: Path) -> None:
    plan, paid = sims
    cap_solves = 3  # room for 3 of the 4 tight tasks: the 4th stays in line and misses its deadline
    out, ids, samples = await _run(redis_server, redis, sims, tmp_path, on_deadline=True, cap_solves=cap_solves)
    tight, loose = _by(out, ids, "T"), _by(out, ids, "L")
    paid_ = [o for o in tight if isinstance(o, Solved) and o.provider == "twocaptcha"]
    ps, st = paid.stats(), await Spend(redis, "captcha").state()
    spans = [((o.timings.finished_at or 0) - (o.timings.claimed_at or 0)) * SPEED for o in paid_
             if isinstance(o, Solved)]
    print(f"on a deadline: {len(paid_)} of {len(tight)} tight at the provider, "
          f"{sum(isinstance(o, Expired) for o in tight)} expired; {len(loose)} loose at CaptchaAI; spend "
          f"{st.hour} micro of cap {cap_solves * PRICE} (max sample {max(samples)} of {len(samples)}); provider "
          f"solves {min(spans):.0f}-{max(spans):.0f} model s")
    assert all(isinstance(o, Solved) and o.provider is None for o in loose), "every loose task waited for the plan"
    assert len(paid_) == cap_solves, out
    assert sum(isinstance(o, Expired) for o in tight) == len(tight) - cap_solves, "the one past the cap waited"
    assert samples and max(samples) <= cap_solves * PRICE, "the spend went above the cap"
    assert (ps["submitted"], ps["charged_micro"]) == (cap_solves, cap_solves * PRICE)
    assert st.hour == st.totals["twocaptcha|turnstile"] == cap_solves * PRICE and st.reserved == 0
    assert plan.stats()["submitted"] == 2 + len(loose), "CaptchaAI saw the warm-up and the loose tasks only"


@pytest.mark.integration
async def test_with_routing_on_a_deadline_off_the_backlog_waits_for_captchaai(
        redis_server: RedisServer, redis: Redis, sims: tuple[SimProc, SimProc], tmp_path: Path) -> None:
    _, paid = sims
    out, ids, _ = await _run(redis_server, redis, sims, tmp_path, on_deadline=False, cap_solves=3)
    tight, loose = _by(out, ids, "T"), _by(out, ids, "L")
    print(f"off: {sum(isinstance(o, Expired) for o in tight)} of {len(tight)} tight expired")
    assert all(isinstance(o, Expired) for o in tight), "the plan answers the tight tasks after their deadline"
    assert all(isinstance(o, Solved) and o.provider is None for o in loose)
    assert paid.stats()["submitted"] == 0 and (await Spend(redis, "captcha").state()).hour == 0
