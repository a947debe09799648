// The env a form would give, shown beside its rows before anything is submitted.
//
// A form with data-preview posts what it holds (with its CSRF token) to that URL 400 ms
// after the last edit; the server answers with the preview endpoint's own result. Each
// problem is shown next to the row whose variable it names; the rest, and the resolved
// env with each variable's source, scope and matched condition, in the panel. Without
// JavaScript the panel stays hidden and the form is checked when it is submitted.
"use strict";
(() => {
  const DEBOUNCE_MS = 400;

  // One cell; on a phone the table is cards (style.css), each cell labelled and an empty
  // one left out.
  function cell(text, { code = false, className = "", label = "" } = {}) {
    const td = document.createElement("td");
    const inner = code ? document.createElement("code") : td;
    const empty = text === null || text === undefined;
    inner.textContent = empty ? "—" : String(text);
    if (code) td.append(inner);
    if (className) td.className = className;
    if (label) td.dataset.label = label;
    if (empty) td.classList.add("none");
    return td;
  }

  function problemItem(problem, warning) {
    const li = document.createElement("li");
    if (warning) li.className = "warning";
    const rule = document.createElement("span");
    rule.className = "rule";
    rule.textContent = problem.rule;
    li.append(rule, `: ${problem.message}`);
    return li;
  }

  // The table row of the form whose name field holds this variable, if any.
  function rowOf(form, variable) {
    const fields = form.querySelectorAll("input[name$='-name']");
    const field = Array.from(fields).find((input) => input.value.trim() === variable);
    return field ? field.closest("td") : null;
  }

  // Errors and warnings no row names go in the panel, each in its own list: a warning is
  // advice, never styled as a refusal.
  function showProblems(form, panel, problems, warnings) {
    form.querySelectorAll(".live-problems").forEach((el) => el.remove());
    const errorList = panel.querySelector("#preview-problems");
    const warningList = panel.querySelector("#preview-warnings");
    errorList.replaceChildren();
    warningList.replaceChildren();
    const place = (problem, warning) => {
      const where = problem.variable ? rowOf(form, problem.variable) : null;
      if (!where) {
        (warning ? warningList : errorList).append(problemItem(problem, warning));
        return;
      }
      let list = where.querySelector(".live-problems");
      if (!list) {
        list = document.createElement("ul");
        list.className = "field-errors live-problems";
        where.append(list);
      }
      list.append(problemItem(problem, warning));
    };
    problems.forEach((p) => place(p, false));
    warnings.forEach((p) => place(p, true));
    errorList.hidden = errorList.children.length === 0;
    warningList.hidden = warningList.children.length === 0;
  }

  function showEnv(panel, variables) {
    const body = panel.querySelector("#preview-env tbody");
    body.replaceChildren(...variables.map((v) => {
      const tr = document.createElement("tr");
      tr.append(cell(v.name, { code: true, className: "title" }),
                cell(v.value, { code: true, className: "value full" }),
                cell(v.source, { label: "source" }), cell(v.scope, { label: "scope" }),
                cell(v.when, { label: "when" }));
      return tr;
    }));
  }

  // The doctor's pre-flight read of the task's scripts, when the form sends some: the
  // reads a policy default satisfies and the names built at run time (what is missing or
  // unread is among the warnings above, beside its row).
  function showDoctor(panel, report) {
    const box = panel.querySelector("#preview-doctor");
    if (!box) return;
    const list = box.querySelector("ul");
    list.replaceChildren();
    box.hidden = !report;
    if (!report) return;
    const read = (report.scripts || []).map((s) => s.path).join(", ");
    box.querySelector("#preview-doctor-scripts").textContent =
      `Scripts read, never run: ${read || "none"}.`;
    [...(report.from_defaults || []), ...(report.unknowable || [])].forEach((item) => {
      const li = document.createElement("li");
      li.textContent = item.message;
      list.append(li);
    });
  }

  function render(form, panel, result) {
    panel.querySelector("#preview-table").hidden = false;
    const errors = result.errors || [];
    const warnings = result.warnings || [];
    const advice = warnings.length
      ? ` ${warnings.length} warning${warnings.length > 1 ? "s" : ""} (advice, not a refusal).` : "";
    panel.querySelector("#preview-state").textContent = (errors.length
      ? `Would be rejected: ${errors.length} problem${errors.length > 1 ? "s" : ""}, marked below and next to the rows.`
      : `Would be accepted with policy version ${result.policy_version}.`) + advice;
    showProblems(form, panel, errors, warnings);
    showDoctor(panel, result.doctor);
    showEnv(panel, result.variables || []);
    const differs = (result.differs || []).map((d) => `${d.name}: ${d.values}`);
    panel.querySelector("#preview-differs").textContent = differs.length
      ? `Replica 0 is shown; in the other replicas, ${differs.join("; ")}.` : "";
  }

  function watch(form) {
    const panel = document.getElementById("preview");
    // Shown from the start, so that the rows beside it never move when it fills.
    panel.hidden = false;
    panel.querySelector("#preview-state").textContent =
      "Edit the rows: what they would give shows here, before anything is submitted.";
    let timer = null;
    let sent = 0;
    async function ask() {
      const mine = ++sent;
      const response = await fetch(form.dataset.preview, {
        method: "POST", body: new FormData(form), credentials: "same-origin" });
      if (mine !== sent || !response.ok || response.redirected) return;
      render(form, panel, await response.json());
    }
    const later = () => {
      clearTimeout(timer);
      timer = setTimeout(() => ask().catch(() => {}), DEBOUNCE_MS);
    };
    form.addEventListener("input", later);
    form.addEventListener("change", later);
  }

  document.querySelectorAll("form[data-preview]").forEach(watch);
})();
