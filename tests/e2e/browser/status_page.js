// status_page.js -- loads sluiced's status page (GET /) in Debian's
// headless Chromium through playwright-core, for tests/test_status_page.sh.
//
//     node status_page.js URL EXPECT.json SCREENSHOT.png
//
// EXPECT.json: {"rules": {NAME: {"allowed": N, "denied": N}, ...},
//               "labels": {NAME: HEADING, ...},
//               "all": {"allowed": N, "denied": N},
//               "fronts": {FRONT: {"allowed": N, "denied": N}, ...},
//               "backend": NAME,
//               "keys": [{"key": K, "denied": N}, ...]}
// Prints one line per check, "PASS name" or "FAIL name: why", and exits 1
// if any failed: the page loaded with no console error, no failed request
// and no script error; every decision's chart drew exactly the expected
// totals (the page's record, the canvas's data attributes and pixels) and
// the fronts' table shows each front's; the chart drew exactly the
// expected totals per rule (the page's own record of what it drew,
// window.sluiceStatus, and the canvas's data attributes) with pixels of
// the allowed and denied colours on each rule's canvas, each headed by its
// label (the limit's size and window) with its rule name beneath; the
// header shows the clients per front, the backend and the decisions per
// second; each hostile key shows as text, verbatim, having run nothing;
// and a screenshot saved.
"use strict";

const fs = require("fs");
const os = require("os");
const path = require("path");
const { chromium } = require("playwright-core");

const [url, expectPath, shot] = process.argv.slice(2);
const expect = JSON.parse(fs.readFileSync(expectPath, "utf8"));
const WAIT_MS = 30000; // for the page to have drawn the expected traffic
let failed = 0;

function check(name, okay, why) {
  if (okay) {
    console.log("PASS " + name);
  } else {
    failed++;
    console.log("FAIL " + name + ": " + why);
  }
}

(async () => {
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), "sluice-chromium-"));
  let ctx;
  try {
    ctx = await chromium.launchPersistentContext(profile, {
      executablePath: "/usr/bin/chromium",
      headless: true,
      viewport: { width: 1280, height: 800 },
      args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync"],
    });
    const page = ctx.pages()[0] || (await ctx.newPage());
    const problems = [];
    page.on("console", (m) => {
      if (m.type() === "error" || m.type() === "warning") problems.push("console " + m.type() + ": " + m.text());
    });
    page.on("pageerror", (e) => problems.push("script error: " + e.message));
    page.on("requestfailed", (r) => problems.push("request failed: " + r.url() + " " + (r.failure() || {}).errorText));
    page.on("response", (r) => {
      if (r.status() >= 400) problems.push("HTTP " + r.status() + " for " + r.url());
    });
    const requested = [];
    page.on("request", (r) => requested.push(r.url()));

    const res = await page.goto(url, { waitUntil: "load" });
    check("GET / is 200", res && res.status() === 200, "status " + (res && res.status()));

    let drawn = null;
    try {
      await page.waitForFunction((want) => {
        const s = window.sluiceStatus;
        if (!s || !s.updates) return false;
        return Object.keys(want.rules).every((r) => s.drawn[r] && s.drawn[r].allowed === want.rules[r].allowed &&
                                       s.drawn[r].denied === want.rules[r].denied) &&
          s.all && s.all.allowed === want.all.allowed && s.all.denied === want.all.denied;
      }, expect, { timeout: WAIT_MS, polling: 100 });
    } catch (e) {
      /* reported below with what it drew instead */
    }
    drawn = await page.evaluate(() => window.sluiceStatus && window.sluiceStatus.drawn);
    for (const [rule, want] of Object.entries(expect.rules)) {
      const got = drawn && drawn[rule];
      check("chart of rule " + JSON.stringify(rule) + " drew " + want.allowed + " allowed, " + want.denied + " denied",
            got && got.allowed === want.allowed && got.denied === want.denied,
            "the page drew " + JSON.stringify(got) + " (all: " + JSON.stringify(drawn) + ")");
      // the canvas itself: its data attributes, and pixels of both colours
      const c = await page.evaluate((name) => {
        const cv = Array.from(document.querySelectorAll("canvas")).find((x) => x.dataset.rule === name);
        if (!cv) return null;
        const g = cv.getContext("2d");
        const d = g.getImageData(0, 0, cv.width, cv.height).data;
        const css = getComputedStyle(document.documentElement);
        const rgb = (v) => {
          const h = css.getPropertyValue(v).trim().replace("#", "");
          return [0, 2, 4].map((i) => parseInt(h.slice(i, i + 2), 16));
        };
        const count = (col) => {
          let n = 0;
          for (let i = 0; i < d.length; i += 4)
            if (d[i] === col[0] && d[i + 1] === col[1] && d[i + 2] === col[2] && d[i + 3] === 255) n++;
          return n;
        };
        return { allowed: cv.dataset.allowed, denied: cv.dataset.denied,
                 green: count(rgb("--allowed")), red: count(rgb("--denied")) };
      }, rule);
      check("canvas of rule " + JSON.stringify(rule) + " carries its totals",
            c && c.allowed === String(want.allowed) && c.denied === String(want.denied), JSON.stringify(c));
      check("canvas of rule " + JSON.stringify(rule) + " has allowed and denied bars",
            c && (want.allowed === 0 || c.green > 0) && (want.denied === 0 || c.red > 0), JSON.stringify(c));
    }

    // every decision: its chart (record, data attributes, pixels) and the fronts' table
    const all = await page.evaluate(() => {
      const cv = document.getElementById("all-chart");
      const d = cv.getContext("2d").getImageData(0, 0, cv.width, cv.height).data;
      const css = getComputedStyle(document.documentElement);
      const rgb = (v) => {
        const h = css.getPropertyValue(v).trim().replace("#", "");
        return [0, 2, 4].map((i) => parseInt(h.slice(i, i + 2), 16));
      };
      const count = (col) => {
        let n = 0;
        for (let i = 0; i < d.length; i += 4)
          if (d[i] === col[0] && d[i + 1] === col[1] && d[i + 2] === col[2] && d[i + 3] === 255) n++;
        return n;
      };
      return { drawn: window.sluiceStatus.all, allowed: cv.dataset.allowed, denied: cv.dataset.denied,
               green: count(rgb("--allowed")), red: count(rgb("--denied")),
               rows: Array.from(document.querySelectorAll("#fronts tr")).map(
                 (tr) => Array.from(tr.children).map((td) => td.textContent)) };
    });
    check("every decision drew " + expect.all.allowed + " allowed, " + expect.all.denied + " denied",
          all.drawn && all.drawn.allowed === expect.all.allowed && all.drawn.denied === expect.all.denied &&
          all.allowed === String(expect.all.allowed) && all.denied === String(expect.all.denied),
          JSON.stringify(all));
    check("every decision's chart has allowed and denied bars", all.green > 0 && all.red > 0,
          JSON.stringify({ green: all.green, red: all.red }));
    for (const [front, want] of Object.entries(expect.fronts)) {
      const row = all.rows.find((r) => r[0] === front);
      check("front " + front + " listed with " + want.allowed + " allowed, " + want.denied + " denied",
            row && row[3] === String(want.allowed) && row[4] === String(want.denied),
            "rows: " + JSON.stringify(all.rows));
    }

    // each rule headed by its limit's size and window, its own name beneath
    const heads = await page.evaluate(() => Array.from(document.querySelectorAll("#rules .rule")).map(
      (div) => [div.querySelector("h3").textContent, (div.querySelector(".name") || {}).textContent,
                div.querySelector("canvas").dataset.rule]));
    for (const [rule, label] of Object.entries(expect.labels)) {
      const h = heads.find((x) => x[2] === rule);
      // the rule's own name beneath when the heading does not start with it (#1, #2)
      const beneath = label.startsWith(rule + " \u2014 ") ? undefined : "counted as " + rule;
      check("rule " + JSON.stringify(rule) + " headed " + JSON.stringify(label) +
            (beneath ? ", " + JSON.stringify(beneath) + " beneath" : ""),
            h && h[0] === label && h[1] === beneath, JSON.stringify(heads));
    }

    // the header: clients per front, the backend, decisions per second
    const head = await page.evaluate(() => ({
      clients: document.getElementById("clients").textContent,
      backend: document.getElementById("backend").textContent,
      rate: document.getElementById("rate").textContent,
      keys: window.sluiceStatus.last && window.sluiceStatus.last.backend.keys,
      rules: document.getElementById("rules").textContent,
    }));
    const cm = /^(\d+) \(resp (\d+), http (\d+), grpc (\d+)\)$/.exec(head.clients);
    check("header shows the clients per front (this page's own HTTP connection among them)",
          cm && cm[2] === "0" && cm[4] === "0" && Number(cm[3]) >= 1 &&
          Number(cm[1]) === Number(cm[2]) + Number(cm[3]) + Number(cm[4]), JSON.stringify(head.clients));
    // the store's keys change as keys at rest expire: the number the page last fetched
    check("header shows the backend " + JSON.stringify(expect.backend) + " and its keys",
          head.backend === expect.backend + ", " + head.keys + " keys" && head.keys >= 1,
          JSON.stringify(head));
    check("header shows decisions per second",
          /^\d+(\.\d+)? allowed, \d+(\.\d+)? denied \(\d+ s\)$/.test(head.rate), JSON.stringify(head.rate));
    check("no \"No rule has decided\" once rules decided", head.rules !== "" && !head.rules.includes("No rule has decided"),
          "the page says it");

    // hostile keys: shown as text, verbatim, nothing run, no element made
    const keys = await page.evaluate(() => Array.from(document.querySelectorAll("#keys td.key")).map((td) => td.textContent));
    const rows = await page.evaluate(() => Array.from(document.querySelectorAll("#keys tr")).map(
      (tr) => Array.from(tr.children).map((td) => td.textContent)));
    for (const k of expect.keys) {
      const row = rows.find((r) => r[0] === k.key);
      check("key " + JSON.stringify(k.key) + " listed as text with " + k.denied + " denied",
            row && row[1] === String(k.denied), "rows: " + JSON.stringify(rows) + " keys: " + JSON.stringify(keys));
    }
    const injected = await page.evaluate(() => ({
      pwned: window.pwned === undefined ? null : window.pwned,
      scripts: document.querySelectorAll("script").length,
      imgs: document.querySelectorAll("img").length,
      inTable: document.querySelectorAll("#keys *:not(tr):not(td)").length,
    }));
    check("hostile keys ran nothing and made no element",
          injected.pwned === null && injected.scripts === 1 && injected.imgs === 0 && injected.inTable === 0,
          JSON.stringify(injected));

    // it refreshed itself from /v1/status at least once more
    const before = await page.evaluate(() => window.sluiceStatus.updates);
    let refreshed = true;
    try {
      await page.waitForFunction((n) => window.sluiceStatus.updates > n, before, { timeout: WAIT_MS, polling: 100 });
    } catch (e) {
      refreshed = false;
    }
    check("the page refreshes itself from /v1/status", refreshed, "updates stayed at " + before);
    const origin = new URL(url).origin;
    const foreign = requested.filter((u) => !u.startsWith(origin + "/") && !u.startsWith("data:"));
    check("nothing requested from elsewhere", foreign.length === 0, JSON.stringify(foreign));
    const asked = new Set(requested.map((u) => new URL(u).pathname));
    check("only / and /v1/status requested", [...asked].every((p) => p === "/" || p === "/v1/status"),
          JSON.stringify([...asked]));

    fs.mkdirSync(path.dirname(shot), { recursive: true });
    await page.screenshot({ path: shot, fullPage: true });
    check("screenshot saved as " + shot, fs.statSync(shot).size > 0, "empty file");
    check("no console error, script error or failed request", problems.length === 0, JSON.stringify(problems));
  } catch (e) {
    check("the browser ran the page", false, e && e.stack ? e.stack : String(e));
  } finally {
    if (ctx) await ctx.close().catch(() => {});
    fs.rmSync(profile, { recursive: true, force: true });
  }
  process.exit(failed ? 1 : 0);
})();
