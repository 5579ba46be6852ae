// Drives Debian's Chromium through every page of the dashboard against a
// populated service (run by tests/api/ui.rs):
//
//   node check.mjs BASE_URL READ_TOKEN SCREENSHOT_DIR APP ACCOUNT
//
// Fails on any console error, page error, failed request or answer >= 400
// (but the one wrong login it makes on purpose); checks the numbers each
// page shows against the API's answers, and every quantity's text against
// its SI value; times each page (navigation start to the end of the load
// event) and saves screenshots. The times are reported; with
// UI_TIME_LIMIT_MS set (the benchmark, docs/benchmarks.md) a page slower
// than that fails too. The test suite runs beside heavier tests on shared
// cores, so it does not judge speed.

import { chromium } from "playwright-core";
import { mkdirSync } from "node:fs";

const [base, token, shots, app, account] = process.argv.slice(2);
const problems = [];
const timings = {};
const problem = (what) => problems.push(what);

async function api(path) {
  const reply = await fetch(base + path, { headers: { authorization: `Bearer ${token}` } });
  if (!reply.ok) throw new Error(`${path}: ${reply.status} ${await reply.text()}`);
  return reply.json();
}

const close = (a, b, rel = 1e-9) => Math.abs(a - b) <= rel * Math.max(Math.abs(a), Math.abs(b), 1e-12);

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const context = await browser.newContext({ viewport: { width: 1366, height: 768 } });
const page = await context.newPage();
let expectedFailures = 0;
// The browser reports the wrong login's 401 on the console too.
let expectedConsole = 0;
page.on("console", (m) => {
  if (m.type() !== "error") return;
  if (expectedConsole > 0 && m.text().includes("401")) expectedConsole -= 1;
  else problem(`console error on ${page.url()}: ${m.text()}`);
});
page.on("pageerror", (e) => problem(`page error on ${page.url()}: ${e}`));
page.on("requestfailed", (r) => {
  // A page left before its icon arrived cancels the icon's request.
  if (r.url().endsWith("/favicon.svg") && r.failure()?.errorText === "net::ERR_ABORTED") return;
  problem(`request failed: ${r.url()} ${r.failure()?.errorText}`);
});
page.on("response", (r) => {
  if (r.status() >= 400) {
    if (expectedFailures > 0) expectedFailures -= 1;
    else problem(`${r.status()} for ${r.url()}`);
  }
});

// Open `path` and time it: navigation start to the end of the load event.
async function visit(name, path) {
  const reply = await page.goto(base + path, { waitUntil: "load" });
  if (!reply || reply.status() !== 200) problem(`${path}: status ${reply?.status()}`);
  const ms = await page.evaluate(() => {
    const [nav] = performance.getEntriesByType("navigation");
    return nav.loadEventEnd - nav.startTime;
  });
  timings[name] = Math.round(ms);
  const limit = Number(process.env.UI_TIME_LIMIT_MS || Infinity);
  if (ms > limit) problem(`${path} took ${ms.toFixed(0)} ms to load (limit: ${limit} ms)`);
}

// Every quantity's text is its SI value in the unit it names, to 3 digits.
const FACTORS = { Wh: 3.6e3, kWh: 3.6e6, MWh: 3.6e9, GWh: 3.6e12, W: 1, kW: 1e3, MW: 1e6,
                  s: 1, min: 60, h: 3600, days: 86400, "%": 1 };
async function checkQuantities(path) {
  const quantities = await page.$$eval(".q", (els) => els.map((e) => [e.textContent, e.dataset.si, e.title]));
  for (const [text, si, title] of quantities) {
    const [number, unit] = text.trim().split(/\s+/);
    const shown = parseFloat(number) * FACTORS[unit];
    const value = parseFloat(si);
    const tolerance = 0.006 * Math.abs(value) + 1e-9;
    if (!(unit in FACTORS) || !(Math.abs(shown - value) <= tolerance)) {
      problem(`${path}: "${text}" does not read ${si}`);
    }
    if (!title.includes(" ")) problem(`${path}: "${text}" has no SI value on hover`);
  }
  return quantities.length;
}

// The SI value of the element matching `selector`.
async function si(selector) {
  const value = await page.$eval(selector, (e) => e.dataset.si ?? e.querySelector("[data-si]")?.dataset.si)
    .catch(() => undefined);
  return value === undefined ? NaN : parseFloat(value);
}

function expect(path, what, shown, want, rel = 1e-9) {
  if (!close(shown, want, rel)) problem(`${path}: ${what} shows ${shown}, the API says ${want}`);
}

// Signing in: a wrong token is refused (401, on purpose), then the read
// token leads back to the page asked for.
await page.goto(base + "/ui/power");
if (!page.url().includes("/ui/login")) problem(`not sent to the login form: ${page.url()}`);
await page.fill("#token", "jc_wrong");
expectedFailures = 1;
expectedConsole = 1;
await Promise.all([page.waitForNavigation(), page.click("button[type=submit]")]);
if (!(await page.textContent(".problem"))?.includes("not valid")) problem("a wrong token is not refused");
await page.fill("#token", token);
await Promise.all([page.waitForNavigation(), page.click("section.login button[type=submit]")]);
if (!page.url().endsWith("/ui/power")) problem(`after login: ${page.url()}, not /ui/power`);
if (expectedFailures !== 0) problem("the wrong login was not answered 401");
expectedConsole = 0;

let checked = 0;
mkdirSync(shots, { recursive: true });

// Applications: the list's first page, as the API lists them.
await visit("applications", "/ui/apps");
{
  const listed = (await api("/v1/apps?limit=200")).items;
  const rows = await page.$$eval("table.apps tbody tr", (trs) => trs.map((tr) => [tr.dataset.app,
    parseFloat(tr.querySelector("[data-check=run_count]").dataset.si)]));
  if (rows.length !== listed.length) problem(`/ui/apps lists ${rows.length}, the API ${listed.length}`);
  rows.forEach(([tag, runs], i) => {
    if (tag !== listed[i]?.tag) problem(`/ui/apps row ${i}: ${tag}, the API: ${listed[i]?.tag}`);
    expect("/ui/apps", `${tag} runs`, runs, listed[i]?.run_count);
  });
  checked += rows.length;
  await page.screenshot({ path: `${shots}/applications.png` });
  // Search.
  const part = app.slice(0, -1);
  await page.fill("#q", part);
  await Promise.all([page.waitForNavigation(), page.click("form.search button")]);
  const found = await page.$$eval("table.apps tbody tr", (trs) => trs.map((tr) => tr.dataset.app));
  if (!found.includes(app) || found.some((t) => !t.toLowerCase().includes(part.toLowerCase()))) {
    problem(`searching "${part}" lists ${found.slice(0, 5)}…`);
  }
}

// One application: its optimal counts and each metric's winning family.
await visit("application", `/ui/apps/${app}`);
{
  const path = `/ui/apps/${app}`;
  const optimal = await api(`/v1/apps/${encodeURIComponent(app)}/optimal-nodes?objective=energy`);
  expect(path, "least energy", await si("[data-check='least_energy.nodes']"), optimal.least_energy.nodes);
  expect(path, "fastest", await si("[data-check='fastest.nodes']"), optimal.fastest.nodes);
  for (const metric of ["ets", "apc", "tts"]) {
    const model = await api(`/v1/apps/${encodeURIComponent(app)}/model?metric=${metric}`);
    const family = await page.textContent(`section[data-metric=${metric}] [data-check=family]`);
    if (family !== model.model.family) problem(`${path} ${metric}: family ${family}, the API ${model.model.family}`);
    const dots = await page.$$eval(`section[data-metric=${metric}] .dot`, (gs) => gs.map((g) => [+g.dataset.x, +g.dataset.y]));
    if (dots.length !== model.points.length) problem(`${path} ${metric}: ${dots.length} history points, the API ${model.points.length}`);
    dots.forEach(([x, y], i) => {
      expect(path, `${metric} point ${x} nodes`, x, model.points[i]?.nodes);
      expect(path, `${metric} point ${x}`, y, model.points[i]?.mean);
      checked += 1;
    });
    const loo = await si(`section[data-metric=${metric}] [data-check=loo_median_pct]`);
    if (model.backtest.leave_one_out) expect(path, `${metric} back-test`, loo, model.backtest.leave_one_out.median_pct, 1e-6);
    if (model.backtest.backward) {
      const backward = await si(`section[data-metric=${metric}] [data-check=backward_median_pct]`);
      expect(path, `${metric} backward back-test`, backward, model.backtest.backward.median_pct, 1e-6);
    }
    if (model.model.family_below !== model.model.family) {
      const below = await page.textContent(`section[data-metric=${metric}] [data-check=family_below]`);
      if (below !== model.model.family_below) problem(`${path} ${metric}: family below ${below}, the API ${model.model.family_below}`);
    }
  }
  checked += await checkQuantities(path);
  await page.screenshot({ path: `${shots}/application.png`, fullPage: true });
}

// Power now: every scope as the API answers it.
await visit("power", "/ui/power");
{
  const scopes = await page.$$eval(".card.scope", (cards) => cards.map((c) => c.dataset.scope));
  for (const scope of scopes) {
    const h = await api(`/v1/power/headroom${scope ? `?partition=${encodeURIComponent(scope)}` : ""}`);
    const card = `.card.scope[data-scope="${scope}"]`;
    expect("/ui/power", `${scope || "system"} draw`, await si(`${card} [data-check=draw_w]`), h.draw_w, 1e-6);
    expect("/ui/power", `${scope || "system"} jobs`, await si(`${card} [data-check=jobs]`), h.jobs.length);
    if (h.cap) {
      expect("/ui/power", `${scope || "system"} cap`, await si(`${card} [data-check=cap_w]`), h.cap.limit_w);
      expect("/ui/power", `${scope || "system"} headroom`, await si(`${card} [data-check=headroom_w]`), h.headroom_w, 1e-6);
    }
    checked += 1;
  }
  if (scopes.length < 2) problem(`/ui/power shows ${scopes.length} scopes`);
  const jobs = await page.$$eval("table.jobs tbody tr", (trs) => trs.length);
  const running = (await api("/v1/jobs?limit=1000")).items.length;
  if (jobs !== Math.min(running, 500)) problem(`/ui/power lists ${jobs} jobs, the API ${running}`);
  checked += await checkQuantities("/ui/power");
  await page.screenshot({ path: `${shots}/power.png` });
}

// Budgets: every account; the commitment shrinks as jobs run, so it is
// compared within 1 %.
await visit("budgets", "/ui/budgets");
{
  const accounts = await page.$$eval("table.budgets tbody tr", (trs) => trs.map((tr) => tr.dataset.account));
  for (const a of accounts.slice(0, 20)) {
    const b = await api(`/v1/budgets/${encodeURIComponent(a)}`);
    const row = `tr[data-account="${a}"]`;
    expect("/ui/budgets", `${a} limit`, await si(`${row} [data-check=limit_j]`), b.limit_j);
    expect("/ui/budgets", `${a} consumed`, await si(`${row} [data-check=consumed_j]`), b.consumed_j, 1e-6);
    expect("/ui/budgets", `${a} committed`, await si(`${row} [data-check=committed_j]`), b.committed_j, 0.01);
    checked += 3;
  }
  if (!accounts.includes(account)) problem(`/ui/budgets does not list ${account}`);
  checked += await checkQuantities("/ui/budgets");
  await page.screenshot({ path: `${shots}/budgets.png` });
}
await visit("budget", `/ui/budgets/${account}`);
{
  const b = await api(`/v1/budgets/${encodeURIComponent(account)}`);
  expect(`/ui/budgets/${account}`, "consumed", await si("[data-check=consumed_j]"), b.consumed_j, 1e-6);
  const lines = await page.$$eval("svg.chart path.line", (ps) => ps.length);
  if (lines < 2) problem(`/ui/budgets/${account}: no burn-down and projection`);
  checked += await checkQuantities(`/ui/budgets/${account}`);
  await page.screenshot({ path: `${shots}/budget.png`, fullPage: true });
}

// Nodes: the classes as the API counts them.
await visit("nodes", "/ui/nodes");
{
  const c = await api("/v1/nodes/classification?bins=20");
  for (const k of c.classes) {
    expect("/ui/nodes", `class ${k.name}`, await si(`tr[data-class="${k.name}"] [data-check=nodes]`), k.nodes);
  }
  expect("/ui/nodes", "P_max", await si("[data-check=p_max_w]"), c.p_max_w);
  const bars = await page.$$eval("svg.chart rect.bar", (rs) => rs.map((r) => +r.dataset.value));
  if (bars.join() !== c.histogram.map((b) => b.nodes).join()) problem(`/ui/nodes histogram ${bars}, the API ${c.histogram.map((b) => b.nodes)}`);
  const outliers = await page.$$eval("table.outliers tbody tr", (trs) => trs.length).catch(() => 0);
  if (outliers !== c.nodes.filter((n) => n.outlier).length) problem(`/ui/nodes lists ${outliers} outliers`);
  checked += c.classes.length + bars.length;
  checked += await checkQuantities("/ui/nodes");
  await page.screenshot({ path: `${shots}/nodes.png` });
}

// A wall display and a phone: nothing wider than the screen.
for (const [name, width, height] of [["wall", 2560, 1440], ["phone", 390, 844]]) {
  await page.setViewportSize({ width, height });
  await visit(`application (${name})`, `/ui/apps/${app}`);
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  if (overflow > 0) problem(`/ui/apps/${app} on a ${name} (${width} px) is ${overflow} px too wide`);
  await page.screenshot({ path: `${shots}/application-${name}.png` });
}

// Signing out ends the session.
await page.setViewportSize({ width: 1366, height: 768 });
await page.goto(base + "/ui/apps");
await Promise.all([page.waitForNavigation(), page.click("form.logout button")]);
await page.goto(base + "/ui/apps");
if (!page.url().includes("/ui/login")) problem(`still signed in after signing out: ${page.url()}`);

await browser.close();
console.log(JSON.stringify({ timings_ms: timings, values_checked: checked, problems }, null, 1));
process.exit(problems.length ? 1 : 0);
