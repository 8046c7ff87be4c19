// bmedge web view: live updates by server-sent events, and the node
// page's actions sent as JSON to the /v1 API. Plain JavaScript, no build.
(function () {
  "use strict";
  var live = document.getElementById("live");
  var status = document.getElementById("live-status");
  var refreshTimer = null;

  function setStatus(text) { if (status) status.textContent = text; }

  // Put a node's new summary into the elements that show it.
  function apply(s) {
    var boxes = document.querySelectorAll('[data-uuid="' + s.uuid + '"]');
    boxes.forEach(function (box) {
      box.querySelectorAll("[data-f]").forEach(function (el) {
        var f = el.getAttribute("data-f");
        if (s.gone) { el.textContent = f === "provision_state" ? "deleted" : ""; return; }
        var v = s[f];
        if (f === "maintenance") v = v ? (box.tagName === "TR" ? "on" : "on" + (s.maintenance_reason ? ": " + s.maintenance_reason : "")) : (box.tagName === "TR" ? "" : "off");
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

  // Read the live part of the page again (at most every 500 ms), without
  // touching the rest: forms and focus outside it stay as they are.
  function refresh() {
    if (!live || refreshTimer) return;
    refreshTimer = setTimeout(function () {
      fetch(location.href, { headers: { "X-UI-Fragment": "1" }, credentials: "same-origin" })
        .then(function (r) { return r.ok ? r.text() : null; })
        .then(function (html) {
          refreshTimer = null;
          if (html == null) return;
          var focused = document.activeElement && live.contains(document.activeElement);
          live.innerHTML = html;
          if (focused) live.focus();
        })
        .catch(function () { refreshTimer = null; });
    }, 500);
  }

  function watching(uuid) {
    if (!live) return false;
    var mode = live.getAttribute("data-refresh");
    if (mode === "any") return true;
    if (mode === "node") return live.getAttribute("data-node") === uuid;
    return live.querySelector('[data-uuid="' + uuid + '"]') !== null;
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
      if (!watching(s.uuid)) return;
      apply(s);
      refresh();
    });
    es.addEventListener("resync", function () { refresh(); });
  } else {
    setStatus("not live: reload to update");
  }

  // Actions of the node page.
  var wrap = document.getElementById("live-wrap");
  var uuid = wrap && wrap.getAttribute("data-uuid");
  var result = document.getElementById("action-result");
  if (!uuid || !result) return;

  function api(method, path, body) {
    var opts = { method: method, credentials: "same-origin",
      headers: { "Content-Type": "application/json", "Accept": "application/json", "X-OpenStack-Ironic-API-Version": "latest" } };
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

  function run(action, form) {
    switch (action) {
      case "maintenance-on": return api("PUT", "/maintenance", { reason: "set from the web view" });
      case "maintenance-off": return api("DELETE", "/maintenance");
      case "active":
        var src = form.elements.image_source.value.trim(), sum = form.elements.image_checksum.value.trim();
        return api("PATCH", "", [
          { op: "add", path: "/instance_info/image_source", value: src },
          { op: "add", path: "/instance_info/image_checksum", value: sum }
        ]).then(function () { return api("PUT", "/states/provision", { target: "active" }); });
      default: return api("PUT", "/states/provision", { target: action });
    }
  }

  function act(btn, form) {
    var action = btn.getAttribute("data-action");
    if (!window.confirm(btn.getAttribute("data-confirm"))) { result.textContent = btn.textContent + ": cancelled."; return; }
    btn.disabled = true;
    result.textContent = btn.textContent + ": sending…";
    run(action, form).then(function () {
      result.textContent = btn.textContent + ": accepted; the state follows live.";
    }, function (err) {
      result.textContent = btn.textContent + " refused: " + err.message;
    }).then(function () { btn.disabled = false; });
  }

  document.querySelectorAll(".buttons [data-action]").forEach(function (btn) {
    btn.addEventListener("click", function () { act(btn, null); });
  });
  var deploy = document.getElementById("deploy");
  if (deploy) deploy.addEventListener("submit", function (ev) {
    ev.preventDefault();
    act(deploy.querySelector("[data-action]"), deploy);
  });
})();
