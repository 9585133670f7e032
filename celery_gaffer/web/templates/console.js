/* The Gaffer console's one script: served from the package, no dependencies, no build.
 *
 * - Theme: "light", "dark" or "system" (the default, which follows prefers-color-scheme),
 *   kept in localStorage and applied from <head>, before the page is first painted.
 * - Times: each <time datetime> shows "in 3 min" / "5 min ago"; its title keeps the exact
 *   time, zone and UTC the server wrote. <time data-exact> keeps its text and adds the
 *   relative one.
 * - Tables: each scrolls inside its own box; each cell gets its column's name in
 *   data-label (a narrow screen shows rows as cards); long names, keys and tasks in cells
 *   may wrap after their separators (- _ . / : @), never inside a word.
 * - Live: every [data-live][id] element is fetched again every few seconds and its
 *   content replaced, unless the reader is busy with it (focus, an open <details>, a
 *   selection, a changed form field inside), the tab is hidden or the Live switch is off.
 *   data-live="passive" elements follow along but do not make a page poll. The page
 *   polled is <body data-live-url>, its GET's path and query; a page without one (the
 *   answer to a POST) does not poll.
 */
(function () {
  "use strict";

  var THEME_KEY = "gaffer.theme";
  var LIVE_KEY = "gaffer.live";
  var POLL_MS = 5000;
  var TICK_MS = 10000;
  var root = document.documentElement;

  function recall(key) {
    try {
      return window.localStorage.getItem(key);
    } catch (error) {
      return null; // storage disabled: the defaults
    }
  }

  function remember(key, value) {
    try {
      window.localStorage.setItem(key, value);
    } catch (error) {
      /* storage disabled: the choice lasts for this page only */
    }
  }

  function applyTheme(choice) {
    if (choice === "light" || choice === "dark") {
      root.setAttribute("data-theme", choice);
    } else {
      root.removeAttribute("data-theme");
    }
  }

  // Before the body exists: no flash of the other theme.
  applyTheme(recall(THEME_KEY));
  root.classList.add("js");

  // -- times ------------------------------------------------------------------------

  function counted(count, unit) {
    return count + " " + unit + (count === 1 ? "" : "s");
  }

  /** "in 3 min", "5 min ago", "now": ``ms`` from now (negative: in the past). */
  function relative(ms) {
    var seconds = Math.abs(ms) / 1000;
    var words;
    if (seconds < 5) return "now";
    if (seconds < 60) {
      words = Math.floor(seconds) + " s";
    } else if (seconds < 3600) {
      words = Math.floor(seconds / 60) + " min";
    } else if (seconds < 36000) {
      var minutes = Math.floor(seconds / 60) % 60;
      words = Math.floor(seconds / 3600) + " h" + (minutes ? " " + minutes + " min" : "");
    } else if (seconds < 86400) {
      words = Math.floor(seconds / 3600) + " h";
    } else if (seconds < 45 * 86400) {
      words = counted(Math.floor(seconds / 86400), "day");
    } else if (seconds < 548 * 86400) {
      words = counted(Math.floor(seconds / (30 * 86400)), "month");
    } else {
      words = counted(Math.floor(seconds / (365 * 86400)), "year");
    }
    return ms > 0 ? "in " + words : words + " ago";
  }

  function showTimes(scope) {
    var now = Date.now();
    var times = scope.querySelectorAll("time[datetime]");
    for (var i = 0; i < times.length; i += 1) {
      var time = times[i];
      var at = Date.parse(time.getAttribute("datetime"));
      if (isNaN(at)) continue;
      if (time.dataset.text === undefined) {
        time.dataset.text = time.textContent; // as the server wrote it
      }
      var words = relative(at - now);
      time.textContent = time.hasAttribute("data-exact") ? time.dataset.text + " · " + words : words;
    }
  }

  // -- tables -----------------------------------------------------------------------

  function labelCells(table) {
    var head = table.tHead && table.tHead.rows[table.tHead.rows.length - 1];
    if (!head) return;
    var names = [];
    for (var c = 0; c < head.cells.length; c += 1) {
      var cell = head.cells[c];
      for (var span = 0; span < cell.colSpan; span += 1) {
        names.push(cell.textContent.trim());
      }
    }
    for (var b = 0; b < table.tBodies.length; b += 1) {
      var rows = table.tBodies[b].rows;
      for (var r = 0; r < rows.length; r += 1) {
        var column = 0;
        for (var d = 0; d < rows[r].cells.length; d += 1) {
          var td = rows[r].cells[d];
          if (!td.hasAttribute("data-label") && td.colSpan === 1 && names[column]) {
            td.setAttribute("data-label", names[column]);
          }
          column += td.colSpan;
        }
      }
    }
  }

  function fitTables(scope) {
    var tables = scope.tagName === "TABLE" ? [scope] : scope.querySelectorAll("table");
    for (var i = 0; i < tables.length; i += 1) {
      var table = tables[i];
      var parent = table.parentElement;
      if (parent && !parent.classList.contains("table-scroll")) {
        var box = document.createElement("div");
        box.className = "table-scroll";
        parent.insertBefore(box, table);
        box.appendChild(table);
      }
      labelCells(table);
    }
  }

  // A long name, key or task (a run of 16 characters or more without a space) may wrap
  // after its separators: a <wbr> after each one, so no word is cut in the middle.
  var LONG_RUN = /\S{16,}/;
  var SEPARATORS = /[-_.\/:@]+(?=[^-\s_.\/:@])/g;

  function softWrap(scope) {
    var cells = scope.matches && scope.matches("td, dd") ? [scope] : scope.querySelectorAll("td, dd");
    for (var c = 0; c < cells.length; c += 1) {
      var walker = document.createTreeWalker(cells[c], NodeFilter.SHOW_TEXT);
      var long = [];
      while (walker.nextNode()) {
        var node = walker.currentNode;
        if (LONG_RUN.test(node.data) && !node.parentElement.closest("pre")) long.push(node);
      }
      long.forEach(function (text) {
        var parts = [];
        var last = 0;
        text.data.replace(SEPARATORS, function (separator, at) {
          parts.push(text.data.slice(last, at + separator.length));
          last = at + separator.length;
          return separator;
        });
        if (!parts.length) return;
        parts.push(text.data.slice(last));
        var fragment = document.createDocumentFragment();
        parts.forEach(function (part, index) {
          if (index) fragment.appendChild(document.createElement("wbr"));
          fragment.appendChild(document.createTextNode(part));
        });
        text.parentNode.replaceChild(fragment, text);
      });
    }
  }

  function enhance(scope) {
    softWrap(scope);
    fitTables(scope);
    showTimes(scope);
  }

  // -- live -------------------------------------------------------------------------

  function liveElements() {
    var found = [];
    var all = document.querySelectorAll("[data-live][id]");
    for (var i = 0; i < all.length; i += 1) {
      var parent = all[i].parentElement;
      if (!(parent && parent.closest("[data-live][id]"))) found.push(all[i]); // outermost
    }
    return found;
  }

  function changedField(element) {
    var fields = element.querySelectorAll("input, textarea, select");
    for (var i = 0; i < fields.length; i += 1) {
      var field = fields[i];
      if (field.type === "checkbox" || field.type === "radio") {
        if (field.checked !== field.defaultChecked) return true;
      } else if (field.tagName === "SELECT") {
        for (var o = 0; o < field.options.length; o += 1) {
          if (field.options[o].selected !== field.options[o].defaultSelected) return true;
        }
      } else if (field.value !== field.defaultValue) {
        return true;
      }
    }
    return false;
  }

  /** Whether the reader is using ``element``: replacing it now would lose that. */
  function inUse(element) {
    var active = document.activeElement;
    if (active && active !== document.body && element.contains(active)) return true;
    if (element.querySelector("details[open]")) return true;
    var selection = window.getSelection();
    if (selection && !selection.isCollapsed && selection.containsNode(element, true)) return true;
    return changedField(element);
  }

  /** Whether the reader is typing in a form anywhere on the page. */
  function typing() {
    var active = document.activeElement;
    if (!active || active.closest(".top")) return false;
    if (active.tagName === "TEXTAREA" || active.tagName === "SELECT") return true;
    if (active.isContentEditable) return true;
    return active.tagName === "INPUT" && !/^(checkbox|radio|button|submit|reset)$/.test(active.type);
  }

  function startLive() {
    var control = document.getElementById("live");
    var toggle = document.getElementById("live-switch");
    var status = document.getElementById("live-status");
    // The page's own URL as the server gave it (a GET's); none on a page answering a
    // POST (a refused edit), which does not poll.
    var liveUrl = document.body.getAttribute("data-live-url");
    var sections = liveElements();
    var active = sections.filter(function (element) {
      return element.getAttribute("data-live") !== "passive";
    });
    if (!liveUrl || !active.length || !control || !toggle) return;
    var served = {};
    sections.forEach(function (element) {
      served[element.id] = element.innerHTML;
    });
    var timer = null;
    var busy = false;
    var on = recall(LIVE_KEY) !== "off";
    toggle.checked = on;
    control.hidden = false;

    function say(state, words) {
      control.setAttribute("data-state", state);
      if (status.textContent !== words) status.textContent = words;
    }

    function schedule(delay) {
      window.clearTimeout(timer);
      timer = on ? window.setTimeout(poll, delay) : null;
    }

    function poll() {
      if (!on) return;
      if (document.hidden) {
        say("hidden", "");
        return; // visibilitychange starts it again
      }
      var selection = window.getSelection();
      if (busy || typing() || (selection && !selection.isCollapsed)) {
        schedule(POLL_MS);
        return;
      }
      busy = true;
      window
        .fetch(liveUrl, {
          headers: { "X-Gaffer-Live": "1" },
          credentials: "same-origin",
          cache: "no-store",
        })
        .then(function (response) {
          if (!response.ok) throw new Error("HTTP " + response.status);
          return response.text();
        })
        .then(function (text) {
          if (!on) return;
          var fresh = new DOMParser().parseFromString(text, "text/html");
          liveElements().forEach(function (element) {
            var update = fresh.getElementById(element.id);
            if (!update || !update.hasAttribute("data-live")) return;
            var html = update.innerHTML;
            if (served[element.id] === html || inUse(element)) return;
            element.innerHTML = html;
            served[element.id] = html;
            enhance(element);
            element.dispatchEvent(new CustomEvent("gaffer:live", { bubbles: true }));
          });
          say("ok", "");
        })
        .catch(function () {
          say("error", "(offline)");
        })
        .then(function () {
          busy = false;
          schedule(POLL_MS);
        });
    }

    function turn(value) {
      on = value;
      toggle.checked = value;
      say(on ? "ok" : "off", on ? "" : "(paused)");
      schedule(on ? 0 : POLL_MS);
    }

    toggle.addEventListener("change", function () {
      remember(LIVE_KEY, toggle.checked ? "on" : "off");
      turn(toggle.checked);
    });
    document.addEventListener("visibilitychange", function () {
      if (!document.hidden && on) schedule(0);
    });
    window.addEventListener("storage", function (event) {
      if (event.key === LIVE_KEY) turn(event.newValue !== "off");
    });
    say(on ? "ok" : "off", on ? "" : "(paused)");
    schedule(POLL_MS);
  }

  // -- theme switch -----------------------------------------------------------------

  function startThemeSwitch() {
    var control = document.getElementById("theme");
    var select = document.getElementById("theme-switch");
    if (!control || !select) return;
    var choice = recall(THEME_KEY);
    select.value = choice === "light" || choice === "dark" ? choice : "system";
    control.hidden = false;
    select.addEventListener("change", function () {
      remember(THEME_KEY, select.value);
      applyTheme(select.value);
    });
    window.addEventListener("storage", function (event) {
      if (event.key !== THEME_KEY) return;
      applyTheme(event.newValue);
      select.value = event.newValue === "light" || event.newValue === "dark" ? event.newValue : "system";
    });
  }

  function start() {
    enhance(document.body);
    startThemeSwitch();
    startLive();
    window.setInterval(function () {
      showTimes(document.body);
    }, TICK_MS);
    root.setAttribute("data-ready", "");
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
