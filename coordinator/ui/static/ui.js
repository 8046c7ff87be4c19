// bmedge web view: live updates by server-sent events, and actions sent
// as JSON to the /v1 API (a node's page, and a selection of nodes in the
// node list). Plain JavaScript, no build.
(function () {
  "use strict";
  var live = document.getElementById("live");
  var status = document.getElementById("live-status");
  var refreshTimer = null, lastRefresh = 0;
  // The node list's selection, by UUID → name: it outlives the live
  // part's refreshes.
  var picked = new Map();

  // Times in the reader's own time zone (the server writes UTC).
  function localTimes(root) {
    root.querySelectorAll("#history time[datetime]").forEach(function (t) {
      var d = new Date(t.getAttribute("datetime"));
      if (!isNaN(d)) { t.textContent = d.toLocaleString(); t.title = t.getAttribute("datetime"); }
    });
  }

  // The node's serial console (docs/console.md): an xterm.js terminal
  // on the console's WebSocket, same origin, the page's login.
  function startConsole() {
    var box = document.getElementById("console-term");
    var toggle = document.getElementById("console-toggle");
    var cstatus = document.getElementById("console-status");
    if (!box) return;
    var node = box.getAttribute("data-uuid");
    if (toggle) toggle.addEventListener("click", function () {
      var on = toggle.getAttribute("data-enabled") !== "true";
      toggle.disabled = true;
      fetch("/v1/nodes/" + encodeURIComponent(node) + "/states/console", {
        method: "PUT", credentials: "same-origin",
        headers: { "Content-Type": "application/json", "X-OpenStack-Ironic-API-Version": "latest" },
        body: JSON.stringify({ enabled: on })
      }).then(function (r) {
        if (r.status === 202) { location.reload(); return; }
        return r.text().then(function (t) { cstatus.textContent = "Console: " + t; toggle.disabled = false; });
      }, function (e) { cstatus.textContent = "Console: " + e.message; toggle.disabled = false; });
    });
    if (box.getAttribute("data-enabled") !== "true") {
      cstatus.textContent = "The console is disabled: enable it to see and type on it.";
      return;
    }
    if (!window.Terminal) { cstatus.textContent = "The terminal (xterm.js) did not load."; return; }
    var term = new window.Terminal({ convertEol: false, scrollback: 5000, rows: 24, cols: 100 });
    term.open(box);
    box.xterm = term; // the terminal's text, for those who read the page (its tests)
    box.received = 0;
    var ws = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/v1/nodes/" + encodeURIComponent(node) + "/console");
    ws.binaryType = "arraybuffer";
    var enc = new TextEncoder();
    ws.onopen = function () { cstatus.textContent = "Connected to the console."; term.focus(); };
    ws.onmessage = function (ev) { box.received += ev.data.byteLength || ev.data.length || 0; term.write(typeof ev.data === "string" ? ev.data : new Uint8Array(ev.data)); };
    ws.onclose = function (ev) { cstatus.textContent = "The console connection closed" + (ev.reason ? ": " + ev.reason : "") + "; reload the page to connect again."; };
    term.onData(function (d) { if (ws.readyState === 1) ws.send(enc.encode(d)); });
  }

  function setStatus(text) { if (status) status.textContent = text; }

  // Put a node's new summary into the elements that show it.
  function apply(s) {
    var boxes = document.querySelectorAll('[data-uuid="' + s.uuid + '"]');
    boxes.forEach(function (box) {
      var row = box.tagName === "TR";
      box.querySelectorAll("[data-f]").forEach(function (el) {
        var f = el.getAttribute("data-f");
        if (s.gone) { el.textContent = f === "provision_state" ? "deleted" : ""; return; }
        var v = s[f];
        if (f === "maintenance") v = v ? (row ? "on" : "on" + (s.maintenance_reason ? ": " + s.maintenance_reason : "")) : (row ? "" : "off");
        if (f === "retired") v = v ? "yes" + (s.retired_reason ? ": " + s.retired_reason : "") : "no";
        if (f === "provision_state") {
          el.innerHTML = "";
          var sp = document.createElement("span");
          sp.className = "state" + (/ failed$|^error$/.test(v) ? " bad" : "");
          sp.textContent = v;
          el.appendChild(sp);
          return;
        }
        el.textContent = v == null ? "" : String(v);
      });
    });
  }

  // Tick again the picked nodes' boxes after the table was made anew.
  function restorePicks() {
    if (!live) return;
    var boxes = live.querySelectorAll("input.pick");
    var all = boxes.length > 0;
    boxes.forEach(function (b) {
      b.checked = picked.has(b.value);
      if (!b.checked) all = false;
    });
    var head = document.getElementById("select-all");
    if (head) head.checked = all;
    var count = document.getElementById("bulk-count");
    if (count) count.textContent = String(picked.size);
  }

  // Read the live part of the page again (at once, then at most every
  // 500 ms), without touching the rest: forms and focus outside it stay
  // as they are.
  function refresh() {
    if (!live || refreshTimer) return;
    refreshTimer = setTimeout(function () {
      lastRefresh = Date.now();
      fetch(location.href, { headers: { "X-UI-Fragment": "1" }, credentials: "same-origin" })
        .then(function (r) { return r.ok ? r.text() : null; })
        .then(function (html) {
          refreshTimer = null;
          if (html == null) return;
          var focused = document.activeElement && live.contains(document.activeElement) ? document.activeElement : null;
          var focusKey = focused && (focused.id || (focused.value && focused.classList.contains("pick") ? focused.value : ""));
          live.innerHTML = html;
          restorePicks();
          localTimes(live);
          if (focused) {
            // Keep the keyboard where it was: the same box, or the part.
            var again = focusKey && (document.getElementById(focusKey) || live.querySelector('input.pick[value="' + focusKey + '"]'));
            (again || live).focus();
          }
        })
        .catch(function () { refreshTimer = null; });
    }, Math.max(0, lastRefresh + 500 - Date.now()));
  }

  function watching(s) {
    if (!live) return false;
    var mode = live.getAttribute("data-refresh");
    if (mode === "any") return true;
    if (mode === "node") return live.getAttribute("data-node") === s.uuid;
    if (mode === "site") return live.getAttribute("data-site") === s.site || live.querySelector('[data-uuid="' + s.uuid + '"]') !== null;
    return live.querySelector('[data-uuid="' + s.uuid + '"]') !== null;
  }

  if (window.EventSource && live) {
    var url = "/ui/events";
    var node = live.getAttribute("data-node");
    if (node) url += "?node=" + encodeURIComponent(node);
    var es = new EventSource(url);
    es.addEventListener("open", function () { setStatus("live"); });
    es.addEventListener("error", function () { setStatus("reconnecting…"); });
    es.addEventListener("node", function (ev) {
      var s;
      try { s = JSON.parse(ev.data); } catch (e) { return; }
      if (!watching(s)) return;
      apply(s);
      refresh();
    });
    es.addEventListener("resync", function () { refresh(); });
    // Sites' reachability and "… ago" move without a node changing: the
    // fleet and site pages read their live part again every 15 s.
    var mode = live.getAttribute("data-refresh");
    if (mode === "any" || mode === "site") setInterval(refresh, 15000);
    // The cluster page: roles, last contact and applied indexes move
    // without any node changing.
    if (mode === "cluster") setInterval(refresh, 5000);
  } else {
    setStatus("not live: reload to update");
  }

  // Actions: JSON requests to the /v1 API, which checks them.
  function api(uuid, method, path, body, version) {
    var opts = { method: method, credentials: "same-origin",
      headers: { "Content-Type": "application/json", "Accept": "application/json", "X-OpenStack-Ironic-API-Version": version || "latest" } };
    if (body !== undefined) opts.body = JSON.stringify(body);
    return fetch("/v1/nodes/" + encodeURIComponent(uuid) + path, opts).then(function (r) {
      if (r.ok) return r;
      return r.text().then(function (t) {
        var msg = t;
        try {
          var j = JSON.parse(t);
          msg = j.error_message || msg;
          try { msg = JSON.parse(msg).faultstring || msg; } catch (e) { /* plain text */ }
        } catch (e) { /* not JSON */ }
        throw new Error(r.status + ": " + msg);
      });
    });
  }

  // deployParams reads a form's deploy fields; it throws an Error that
  // says what to fix.
  function deployParams(form) {
    var src = form.elements.image_source.value.trim(), sum = form.elements.image_checksum.value.trim();
    var cd = form.elements.configdrive.value.trim();
    if (!src) throw new Error("Deploy needs an image URL (image_source).");
    if (!/^[0-9a-fA-F]{64}([0-9a-fA-F]{64})?$/.test(sum)) throw new Error("Deploy needs the image's sha256 or sha512 as hex (image_checksum).");
    var p = { image_source: src, image_checksum: sum };
    if (cd) {
      var obj;
      try { obj = JSON.parse(cd); } catch (e) { throw new Error("The config drive is not JSON: " + e.message); }
      if (obj === null || typeof obj !== "object" || Array.isArray(obj)) throw new Error("The config drive must be a JSON object with meta_data, network_data, user_data or vendor_data.");
      p.configdrive = obj;
    }
    return p;
  }

  function run(uuid, action, p) {
    switch (action) {
      case "maintenance-on": return api(uuid, "PUT", "/maintenance", { reason: "set from the web view" });
      case "maintenance-off": return api(uuid, "DELETE", "/maintenance");
      // retired and retired_reason are fields of API version 1.61.
      case "retire": return api(uuid, "PATCH", "", [
        { op: "replace", path: "/retired", value: true },
        { op: "add", path: "/retired_reason", value: "retired from the web view" }], "1.61");
      case "unretire": return api(uuid, "PATCH", "", [{ op: "replace", path: "/retired", value: false }], "1.61");
      case "active":
        return api(uuid, "PATCH", "", [
          { op: "add", path: "/instance_info/image_source", value: p.image_source },
          { op: "add", path: "/instance_info/image_checksum", value: p.image_checksum }
        ]).then(function () {
          var body = { target: "active" };
          // As Ironic's clients send it (a dictionary: API 1.56 and later).
          if (p.configdrive) body.configdrive = p.configdrive;
          return api(uuid, "PUT", "/states/provision", body);
        });
      default: return api(uuid, "PUT", "/states/provision", { target: action });
    }
  }

  // What each action does, for the confirmation of a selection.
  var effects = {
    manage: ["Manage", "the coordinator checks each node's BMC credentials and the node becomes manageable."],
    inspect: ["Inspect", "each node is powered on into the ramdisk to read its hardware, then powered off."],
    provide: ["Provide", "cleaning erases each node's disks, then the node becomes available."],
    active: ["Deploy", "the image is written to each node's disk, overwriting what is there."],
    deleted: ["Undeploy", "each node's instance is torn down and cleaning erases the node's disks."],
    abort: ["Abort", "what each node is doing now stops, and the node goes to a failed state."],
    "maintenance-on": ["Maintenance on", "the coordinator stops acting on each node (power sync, timers) until maintenance is off."],
    "maintenance-off": ["Maintenance off", "the coordinator acts on each node again."],
    retire: ["Retire", "each node is marked retired: it can no longer be provided, and when undeployed it ends in manageable after cleaning instead of available."],
    unretire: ["Unretire", "each node is no longer marked retired and can be provided again."]
  };

  // The node page's actions.
  var wrap = document.getElementById("live-wrap");
  var uuid = wrap && wrap.getAttribute("data-uuid");
  var result = document.getElementById("action-result");
  if (uuid && result) {
    var act = function (btn, form) {
      var action = btn.getAttribute("data-action"), p = null;
      if (form) {
        try { p = deployParams(form); } catch (e) { result.textContent = btn.textContent + ": " + e.message; return; }
      }
      if (!window.confirm(btn.getAttribute("data-confirm"))) { result.textContent = btn.textContent + ": cancelled."; return; }
      btn.disabled = true;
      result.textContent = btn.textContent + ": sending…";
      run(uuid, action, p).then(function () {
        result.textContent = btn.textContent + ": accepted; the state follows live.";
      }, function (err) {
        result.textContent = btn.textContent + " refused: " + err.message;
      }).then(function () { btn.disabled = false; });
    };
    // Delegated: the actions are in the live part, made anew with the
    // node's state (only those it allows).
    wrap.addEventListener("click", function (ev) {
      var btn = ev.target.closest && ev.target.closest(".buttons [data-action]");
      if (btn) act(btn, null);
    });
    wrap.addEventListener("submit", function (ev) {
      if (ev.target.id !== "deploy") return;
      ev.preventDefault();
      act(ev.target.querySelector("[data-action]"), ev.target);
    });
  }
  localTimes(document);
  // xterm.js comes after this script (deferred, in document order).
  document.addEventListener("DOMContentLoaded", startConsole);

  // The node list's actions on a selection.
  var bulk = document.getElementById("bulk");
  var results = document.getElementById("bulk-results");
  if (!bulk || !live || !results) return;
  var choice = document.getElementById("bulk-action");
  var fields = document.getElementById("bulk-deploy");
  var showFields = function () { fields.hidden = choice.value !== "active"; };
  choice.addEventListener("change", showFields);
  showFields();

  live.addEventListener("change", function (ev) {
    var t = ev.target;
    if (t.id === "select-all") {
      live.querySelectorAll("input.pick").forEach(function (b) {
        if (t.checked) picked.set(b.value, b.getAttribute("data-name")); else picked.delete(b.value);
      });
    } else if (t.classList && t.classList.contains("pick")) {
      if (t.checked) picked.set(t.value, t.getAttribute("data-name")); else picked.delete(t.value);
    } else {
      return;
    }
    restorePicks();
  });
  restorePicks();

  function line(text, cls) {
    var li = document.createElement("li");
    li.textContent = text;
    if (cls) li.className = cls;
    results.appendChild(li);
    return li;
  }

  bulk.addEventListener("submit", function (ev) {
    ev.preventDefault();
    var action = choice.value, eff = effects[action], p = null;
    results.innerHTML = "";
    var chosen = Array.from(picked.entries()).sort(function (a, b) { return a[1].localeCompare(b[1], undefined, { numeric: true }); });
    if (chosen.length === 0) { line("No node is selected: tick the nodes to act on in the table.", "bad"); return; }
    if (action === "active") {
      try { p = deployParams(bulk); } catch (e) { line(e.message, "bad"); return; }
    }
    var names = chosen.map(function (c) { return c[1]; });
    var shown = names.slice(0, 10).join(", ") + (names.length > 10 ? " and " + (names.length - 10) + " more" : "");
    var sentence = eff[0] + " " + (names.length === 1 ? "1 node" : names.length + " nodes") + " (" + shown + "): " + eff[1];
    if (!window.confirm(sentence)) { line(eff[0] + ": cancelled; nothing was sent."); return; }
    var apply = document.getElementById("bulk-apply");
    apply.disabled = true;
    var rows = {};
    chosen.forEach(function (c) { rows[c[0]] = line(c[1] + ": waiting…"); });
    var ok = 0, refused = 0, next = 0;
    var summary = line(eff[0] + ": sending to " + chosen.length + " nodes…");
    // Four requests at a time: a page of 50 nodes goes in a few seconds
    // without holding all the API's connections.
    function worker() {
      if (next >= chosen.length) return Promise.resolve();
      var c = chosen[next++], li = rows[c[0]];
      li.textContent = c[1] + ": sending…";
      return run(c[0], action, p).then(function () {
        ok++;
        li.textContent = c[1] + ": accepted";
        li.className = "ok";
      }, function (err) {
        refused++;
        li.textContent = c[1] + ": refused: " + err.message;
        li.className = "bad";
      }).then(worker);
    }
    var workers = [];
    for (var i = 0; i < Math.min(4, chosen.length); i++) workers.push(worker());
    Promise.all(workers).then(function () {
      summary.textContent = eff[0] + ": " + ok + " accepted, " + refused + " refused; the states in the table follow live.";
      results.appendChild(summary);
      apply.disabled = false;
    });
  });
})();
