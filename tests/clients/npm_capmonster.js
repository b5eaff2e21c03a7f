// Runs the npm CapMonster Cloud client @zennolab_com/capmonstercloud-client against a JSON-API server (the
// simulator or the gateway), every call it offers for a kind CaptchaAI solves, at once, and prints one JSON line
// per call (the same lines as python_clients.py). Installed by `scripts/install-tools.sh --only clients` (npm ci
// in tests/clients/); compat.py starts it with a config file.
//
// The client is pointed with its own option, `new ClientOptions({clientKey, serviceUrl})`. Solve() hands over
// the solution only: the task id each call got is read by a spy on the client instance's own CreateTask (the
// request and the reply pass through unchanged).
"use strict";
const fs = require("fs");
const cmc = require("@zennolab_com/capmonstercloud-client");

const cfg = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const SITEKEY = "6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-";
const PAGE = "https://example.com/login";
const GT = "f".repeat(32), CHALLENGE = "0123456789abcdef0123456789abcdef";
const body = fs.readFileSync(cfg.image).toString("base64");
const [creds, address] = cfg.proxy.split("@");
const [login, password] = creds.split(":");
const [host, port] = address.split(":");
const proxy = { proxyType: "http", proxyAddress: host, proxyPort: Number(port), proxyLogin: login, proxyPassword: password };
const FIELDS = ["gRecaptchaResponse", "cf_clearance", "token", "text"];

const client = () => cmc.CapMonsterCloudClientFactory.Create(new cmc.ClientOptions({ clientKey: cfg.key, serviceUrl: cfg.url }));

async function solve(request) {
  const c = client();
  let created = null;
  const create = c.CreateTask.bind(c);
  c.CreateTask = async (...args) => (created = await create(...args));
  const result = await c.Solve(request);
  if (result.error) throw Object.assign(new Error(String(result.error)), { name: "CaptchaResultError" });
  const s = result.solution;
  const field = FIELDS.find((f) => f in s);
  return { task_id: created && created.taskId != null ? String(created.taskId) : null,
    answer: field ? String(s[field]) : JSON.stringify(s), parsed: !field, user_agent: s.userAgent ?? null };
}

const calls = [
  ["Solve(RecaptchaV2Request({websiteURL, websiteKey}))", "recaptcha_v2",
    () => solve(new cmc.RecaptchaV2Request({ websiteURL: PAGE, websiteKey: SITEKEY }))],
  ["Solve(RecaptchaV2Request({proxy}))", "recaptcha_v2",
    () => solve(new cmc.RecaptchaV2Request({ websiteURL: PAGE, websiteKey: SITEKEY, proxy }))],
  ["Solve(RecaptchaV2EnterpriseRequest({enterprisePayload}))", "recaptcha_v2_enterprise",
    () => solve(new cmc.RecaptchaV2EnterpriseRequest({ websiteURL: PAGE, websiteKey: SITEKEY, enterprisePayload: { s: "s-value" } }))],
  ["Solve(RecaptchaV3ProxylessRequest({minScore, pageAction}))", "recaptcha_v3",
    () => solve(new cmc.RecaptchaV3ProxylessRequest({ websiteURL: PAGE, websiteKey: SITEKEY, minScore: 0.7, pageAction: "login" }))],
  ["Solve(RecaptchaV3EnterpriseRequest({pageAction}))", "recaptcha_v3_enterprise",
    () => solve(new cmc.RecaptchaV3EnterpriseRequest({ websiteURL: PAGE, websiteKey: SITEKEY, pageAction: "login" }))],
  ["Solve(ImageToTextRequest({body}))", "image", () => solve(new cmc.ImageToTextRequest({ body }))],
  ["Solve(GeeTestRequest({gt, challenge}))", "geetest",
    () => solve(new cmc.GeeTestRequest({ websiteURL: PAGE, gt: GT, challenge: CHALLENGE }))],
  ["Solve(GeeTestRequest({version: '4', gt}))", "geetest_v4",
    () => solve(new cmc.GeeTestRequest({ websiteURL: PAGE, gt: GT, version: "4" }))],
  ["Solve(TurnstileRequest({websiteURL, websiteKey}))", "turnstile",
    () => solve(new cmc.TurnstileRequest({ websiteURL: PAGE, websiteKey: "0x4AAAAAAAB0000000000000" }))],
  ["Solve(TurnstileRequest({cloudflareTaskType: 'cf_clearance', proxy}))", "cloudflare_challenge",
    () => solve(new cmc.TurnstileRequest({ websiteURL: PAGE, websiteKey: "0x4AAAAAAAB0000000000000", cloudflareTaskType: "cf_clearance",
      htmlPageBase64: Buffer.from("<html></html>").toString("base64"), userAgent: "Mozilla/5.0 Test", proxy }))],
  ["getBalance()", null, async () => ({ value: await client().getBalance() })],
];

(async () => {
  const settled = await Promise.allSettled(calls.map(([, , run]) => run()));
  settled.forEach((s, i) => {
    const [name, kind] = calls[i];
    const line = { call: name, kind };
    if (s.status === "fulfilled") {
      Object.assign(line, s.value, { ok: true });
    } else {
      const err = s.reason;
      Object.assign(line, { ok: false, error: `${err && err.name}: ${(err && (err.err || err.message)) || err}` });
    }
    console.log(JSON.stringify(line));
  });
})();
