// Live pages and local times; the pages work without it (reload shows the same).
//
// Times are rendered as <time datetime="ISO"> in UTC; here they show in the reader's
// time zone, the exact ISO time on hover.
//
// A page with work in flight polls a small JSON endpoint (api/console/live.py says why
// polling and not server-sent events): every 2 s after a change, half again longer after
// each unchanged answer (a 304 to our If-None-Match) up to every 20 s, and never again
// once everything shown is final. A page loaded on a final task has no data-url: it
// makes no request at all.
"use strict";
(() => {
  const FIRST_MS = 2000;
  const MOST_MS = 20000;
  const GROWTH = 1.5;

  function localize(root) {
    root.querySelectorAll("time[datetime]").forEach((el) => {
      const exact = el.getAttribute("datetime");
      const moment = new Date(exact);
      if (Number.isNaN(moment.getTime())) return;
      el.title = exact;
      el.textContent = moment.toLocaleString();
    });
  }

  // Ask url() until handle(data) returns false; unchanged answers slow the pace down.
  function poll(url, handle) {
    let etag = null;
    let wait = FIRST_MS;
    const later = () => setTimeout(ask, wait);
    async function ask() {
      let response;
      try {
        response = await fetch(url(), { cache: "no-store", credentials: "same-origin",
                                        headers: etag ? { "If-None-Match": etag } : {} });
      } catch (error) {
        wait = Math.min(wait * GROWTH, MOST_MS);
        return later();
      }
      if (response.status === 304) {
        wait = Math.min(wait * GROWTH, MOST_MS);
        return later();
      }
      // Logged out (sent to the login page) or gone: stop; a reload says why.
      if (!response.ok || response.redirected) return undefined;
      etag = response.headers.get("ETag");
      if ((await handle(await response.json())) === false) return undefined;
      wait = FIRST_MS;
      return later();
    }
    later();
  }

  // Replace this page's [data-live] sections with those of a fresh copy of the page.
  async function refreshSections() {
    const response = await fetch(window.location.href, { cache: "no-store",
                                                          credentials: "same-origin" });
    if (!response.ok || response.redirected) return;
    const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
    document.querySelectorAll("[data-live][id]").forEach((section) => {
      const replacement = fresh.getElementById(section.id);
      if (replacement && !section.contains(document.activeElement)) {
        section.querySelectorAll("details[id][open]").forEach((opened) => {  // kept open
          const twin = fresh.getElementById(opened.id);
          if (twin) twin.open = true;
        });
        section.replaceWith(document.adoptNode(replacement));
      }
    });
    // A log still empty on both sides: take the fresh page's word for why (a revision
    // rejected, cancelled before it ran). Output is only ever appended, never replaced.
    const log = document.getElementById("log");
    const freshLog = fresh.getElementById("log");
    if (log && freshLog && log.hasAttribute("data-empty") && freshLog.hasAttribute("data-empty")) {
      log.textContent = freshLog.textContent;
    }
    localize(document);
  }

  // chunk.skipped: bytes the store trimmed before this page read them; said once, here.
  // A log with data-empty holds a note (why nothing printed yet), not output: the note
  // stays until output comes, and refreshSections keeps it current.
  function appendLog(log, chunk) {
    if (chunk.reset) {
      log.textContent = "";
      log.setAttribute("data-empty", "");
    }
    const empty = log.hasAttribute("data-empty");
    const lineEnded = empty || log.textContent.endsWith("\n");
    const dropped = chunk.skipped
      ? `${lineEnded ? "" : "\n"}… ${chunk.skipped} bytes of earlier output dropped\n` : "";
    if (!chunk.text && !dropped) return;
    if (empty) {
      log.textContent = "";
      log.removeAttribute("data-empty");
    }
    const atBottom = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
    log.append(dropped);
    appendPieces(log, chunk.text);
    if (atBottom) log.scrollTop = log.scrollHeight;
  }

  // The platform's own lines start with U+001F, which a step's output never holds
  // (shared/task/replica_logs.py): each is shown, without it, in a span of its own style,
  // as the page's first render shows them.  A chunk may end inside such a line: the
  // next goes on in the same span.
  const MARK = "\u001f";

  function platformSpan(log, text) {
    const span = document.createElement("span");
    span.className = "platform";
    span.textContent = text;
    log.append(span);
  }

  function appendPieces(log, text) {
    let pos = 0;
    const last = log.lastChild;
    if (last && last.nodeType === 1 && last.classList.contains("platform")
        && !last.textContent.endsWith("\n")) {
      const end = text.indexOf("\n");
      pos = end === -1 ? text.length : end + 1;
      last.textContent += text.slice(0, pos);
    }
    while (pos < text.length) {
      const at = text.indexOf(MARK, pos);
      if (at === -1) {
        log.append(text.slice(pos));
        return;
      }
      if (at > pos) log.append(text.slice(pos, at));
      const end = text.indexOf("\n", at);
      const stop = end === -1 ? text.length : end + 1;
      platformSpan(log, text.slice(at + 1, stop));
      pos = stop;
    }
  }

  function followTask(live) {
    const log = document.getElementById("log");
    const follow = live.dataset.follow === "yes";
    let logRevision = Number(live.dataset.logRevision);
    let offset = Number(live.dataset.offset);
    let seen = `${live.dataset.status}/${live.dataset.revision}`;
    const replica = live.dataset.replica === undefined ? "" : `&replica=${live.dataset.replica}`;
    const url = () => `${live.dataset.url}?log_revision=${logRevision}&offset=${offset}${replica}`;
    poll(url, async (data) => {
      if (data.log.revision === logRevision) {
        appendLog(log, data.log);
        offset = data.log.offset;
      }
      const now = `${data.status}/${data.revision}`;
      if (now !== seen) {
        seen = now;
        if (follow && data.revision !== logRevision) {  // a new revision: follow its log
          logRevision = data.revision;
          offset = 0;
          appendLog(log, { reset: true, text: "" });
        }
        await refreshSections();
      }
      return !data.final;
    });
  }

  function followList(table) {
    poll(() => table.dataset.live, (data) => {
      data.items.forEach((item) => {
        const row = table.querySelector(`tr[data-task="${item.id}"]`);
        if (!row) return;
        const status = row.querySelector("[data-field=status]");
        status.textContent = item.status;
        status.className = `status status-${item.status}`;
        row.querySelector("[data-field=revision]").textContent = item.revision;
      });
      return data.items.some((item) => !item.final);
    });
  }

  localize(document);
  const live = document.getElementById("live");
  if (live && live.dataset.url) followTask(live);
  const list = document.querySelector("table[data-live]");
  if (list) followList(list);
})();
