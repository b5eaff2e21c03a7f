// Runs the npm client @2captcha/captcha-solver against the simulator, every call it offers for a CaptchaAI kind
// at once, and prints one JSON line per call (the same lines as python_clients.py). Installed by
// `scripts/install-tools.sh --only clients` (npm ci in tests/clients/); compat.py starts it with a config file.
//
// The client has no base-URL setting (its endpoints are constants): the Solver instance's `in` and `res` getters
// are overridden to point at the simulator.
"use strict";
const fs = require("fs");
const { Solver } = require("@2captcha/captcha-solver");

const cfg = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const SITEKEY = "6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-";
const PAGE = "https://example.com/login";
const GT = "f".repeat(32), CHALLENGE = "0123456789abcdef0123456789abcdef";

const solver = new Solver(cfg.key, 500);
Object.defineProperty(solver, "in", { get: () => `${cfg.url}/in.php` });
Object.defineProperty(solver, "res", { get: () => `${cfg.url}/res.php` });
const body = fs.readFileSync(cfg.image).toString("base64");
const proxy = { proxy: cfg.proxy, proxytype: "HTTP" };
const rc = { pageurl: PAGE, googlekey: SITEKEY };

const solved = (r) => ({ task_id: String(r.id), answer: String(r.data), parsed: false, user_agent: r.user_agent ?? null });
const value = (v) => ({ value: v });

const calls = [
  ["recaptcha({pageurl, googlekey})", "recaptcha_v2", () => solver.recaptcha(rc), solved],
  ["recaptcha({invisible: 1})", "recaptcha_v2", () => solver.recaptcha({ ...rc, invisible: 1 }), solved],
  ["recaptcha({enterprise: 1})", "recaptcha_v2_enterprise", () => solver.recaptcha({ ...rc, enterprise: 1 }), solved],
  ["recaptcha({version: 'v3', action})", "recaptcha_v3",
    () => solver.recaptcha({ ...rc, version: "v3", action: "login" }), solved],
  ["recaptcha({version: 'v3', enterprise: 1})", "recaptcha_v3_enterprise",
    () => solver.recaptcha({ ...rc, version: "v3", action: "login", enterprise: 1 }), solved],
  ["geetest({gt, challenge, pageurl})", "geetest",
    () => solver.geetest({ pageurl: PAGE, gt: GT, challenge: CHALLENGE }), solved],
  ["geetestV4({captcha_id, pageurl})", "geetest_v4", () => solver.geetestV4({ pageurl: PAGE, captcha_id: GT }), solved],
  ["lemin({captcha_id, div_id, pageurl})", "lemin",
    () => solver.lemin({ pageurl: PAGE, captcha_id: "CROPPED_3dfdd5c", div_id: "lemin-cropped" }), solved],
  ["cloudflareTurnstile({sitekey, pageurl})", "turnstile",
    () => solver.cloudflareTurnstile({ pageurl: PAGE, sitekey: "0x4AAAA" }), solved],
  ["imageCaptcha({body})", "image", () => solver.imageCaptcha({ body }), solved],
  ["grid({body, textinstructions, rows, cols})", "grid",
    () => solver.grid({ body, textinstructions: "Select all cars", rows: 4, cols: 4 }), solved],
  ["friendlyCaptcha({sitekey, pageurl})", "friendly_captcha",
    () => solver.friendlyCaptcha({ pageurl: PAGE, sitekey: "FCMSITE" }), solved],
  ["captchaFox({sitekey, pageurl, userAgent, proxy})", "captchafox",
    () => solver.captchaFox({ pageurl: PAGE, sitekey: "sk-fox", userAgent: "Mozilla/5.0 Test", ...proxy }), solved],
  ["cloudflareTurnstile({pingback})", "turnstile",
    () => solver.cloudflareTurnstile({ pageurl: PAGE, sitekey: "0x4AAAA", pingback: cfg.pingback }), solved],
  ["balance()", null, () => solver.balance(), value],
  ["goodReport(id)", null, async () => solver.goodReport((await solver.imageCaptcha({ body })).id), value],
  ["badReport(id)", null, async () => solver.badReport((await solver.imageCaptcha({ body })).id), value],
];

(async () => {
  const settled = await Promise.allSettled(calls.map(([, , run]) => run()));
  settled.forEach((s, i) => {
    const [name, kind, , read] = calls[i];
    const line = { call: name, kind };
    if (s.status === "fulfilled") {
      Object.assign(line, read(s.value), { ok: true });
    } else {
      const err = s.reason;
      Object.assign(line, { ok: false, error: `${err && err.name}: ${(err && (err.err || err.message)) || err}` });
    }
    console.log(JSON.stringify(line));
  });
})();
