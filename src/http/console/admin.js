// imgcas's operator page (src/http/console/): refreshes the live part in place, sends the
// moderation forms to the API's routes with the session cookie, and notes any script error
// or Content-Security-Policy violation on <body> (data-problems), where a test can read it.
"use strict";
(function () {
  const body = document.body;
  body.dataset.loadedAt = String(Date.now());
  body.dataset.refreshes = "0";
  const problems = [];
  const note = (what) => {
    problems.push(what);
    body.dataset.problems = problems.join(" | ");
  };
  window.addEventListener("error", (e) => note("error: " + e.message));
  window.addEventListener("unhandledrejection", (e) => note("rejection: " + e.reason));
  document.addEventListener("securitypolicyviolation", (e) =>
    note("csp: " + e.violatedDirective + " " + e.blockedURI));

  async function part(name) {
    const answer = await fetch("/admin?part=" + name, { credentials: "same-origin" });
    if (!answer.ok) throw new Error("/admin?part=" + name + " answered " + answer.status);
    document.getElementById(name).innerHTML = await answer.text();
  }

  const every = Math.max(1, Number(body.dataset.refresh || "10")) * 1000;
  async function refresh() {
    try {
      await part("live");
      body.dataset.refreshes = String(Number(body.dataset.refreshes) + 1);
    } catch (e) {
      // A node restarting or a session expired: say so, keep the figures shown.
      body.dataset.stale = String(e.message || e);
    }
    setTimeout(refresh, every);
  }
  setTimeout(refresh, every);

  // A form of class "api" calls data-method data-path: "{field}" in the path takes the
  // field's value, and the fields data-json names go in a JSON body.
  document.addEventListener("submit", async (event) => {
    const form = event.target;
    if (!(form instanceof HTMLFormElement) || !form.classList.contains("api")) return;
    event.preventDefault();
    const output = form.querySelector("output");
    const fields = new FormData(form);
    const path = form.dataset.path.replace(/\{(\w+)\}/g, (_, name) =>
      encodeURIComponent(String(fields.get(name) || "").trim()));
    const init = { method: form.dataset.method, credentials: "same-origin", headers: {} };
    if (form.dataset.json) {
      const json = {};
      for (const name of form.dataset.json.split(" ")) {
        const value = String(fields.get(name) || "").trim();
        if (value) json[name] = name === "sha256" ? value.toLowerCase() : value;
      }
      init.headers["content-type"] = "application/json";
      init.body = JSON.stringify(json);
    }
    if (output) output.textContent = "…";
    try {
      const answer = await fetch(path, init);
      const text = await answer.text();
      let shown = answer.status + "";
      try {
        const parsed = JSON.parse(text);
        shown += parsed.error ? " " + parsed.error.code + ": " + parsed.error.message : " done";
      } catch (_) {
        shown += " " + text.slice(0, 200);
      }
      body.dataset.lastAction = form.dataset.method + " " + path + " " + answer.status;
      if (answer.ok) await part("moderation");
      const again = document.getElementById(form.id);
      const shownIn = again ? again.querySelector("output") : output;
      if (shownIn) shownIn.textContent = shown;
    } catch (e) {
      if (output) output.textContent = String(e.message || e);
    }
  });
})();
