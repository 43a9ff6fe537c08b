// metamod transcript viewer: vanilla JS over the JSON embedded in #view-data; no network, no libraries.
// Filters live in the URL fragment (#task=..&method=..&correct=..&disagree=..&stop=..&text=..&q=..), so a filtered
// view is a shareable link. The detail of a question is built only when it is selected.
(function () {
  "use strict";
  var DATA = JSON.parse(document.getElementById("view-data").textContent);
  var FILTERS = ["task", "method", "correct", "disagree", "stop", "text"];
  var rows = [];
  var selected = null;

  function el(tag, attrs, children) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) {
      if (k === "text") node.textContent = attrs[k];
      else if (k === "className") node.className = attrs[k];
      else node.setAttribute(k, attrs[k]);
    });
    (children || []).forEach(function (c) {
      if (c === null || c === undefined) return;
      node.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
    });
    return node;
  }
  function show(v) { return v === null || v === undefined || v === "" ? "-" : String(v); }
  function verdict(v) {
    if (v === true) return el("span", { className: "ok", text: "correct" });
    if (v === false) return el("span", { className: "bad", text: "wrong" });
    return el("span", { className: "muted", text: "-" });
  }
  function label(m) { return (DATA.labels && DATA.labels[m]) || m; }
  function option(value, text) { return el("option", { value: value, text: text }); }

  // ------------------------------------------------------------------ filters and the fragment
  function readFragment() {
    var out = {};
    var hash = window.location.hash.replace(/^#/, "");
    hash.split("&").forEach(function (part) {
      if (!part) return;
      var i = part.indexOf("=");
      var k = decodeURIComponent(i < 0 ? part : part.slice(0, i));
      out[k] = i < 0 ? "" : decodeURIComponent(part.slice(i + 1).replace(/\+/g, " "));
    });
    return out;
  }
  function writeFragment() {
    var parts = [];
    FILTERS.forEach(function (k) {
      var v = control(k).value;
      if (v) parts.push(k + "=" + encodeURIComponent(v));
    });
    if (selected) parts.push("q=" + encodeURIComponent(selected));
    var hash = parts.length ? "#" + parts.join("&") : "";
    if (window.location.hash !== hash) history.replaceState(null, "", hash || window.location.pathname);
  }
  function control(name) { return document.getElementById("f-" + name); }
  function setControl(name, value) {
    var c = control(name);
    if (c.tagName === "SELECT" && value && !Array.prototype.some.call(c.options, function (o) { return o.value === value; })) {
      document.getElementById("filter-note").textContent = "unknown " + name + " " + JSON.stringify(value) + " in the link: ignored";
      value = "";
    }
    c.value = value || "";
  }

  function buildControls() {
    var task = control("task");
    task.appendChild(option("", "all (" + DATA.tasks.length + ")"));
    DATA.tasks.forEach(function (t) { task.appendChild(option(t, t)); });
    var method = control("method");
    method.appendChild(option("", "all"));
    DATA.methods.forEach(function (m) { method.appendChild(option(m, label(m))); });
    var stop = control("stop");
    stop.appendChild(option("", "any"));
    for (var r = 0; r < DATA.max_rounds; r++) stop.appendChild(option(String(r), String(r)));
    stop.appendChild(option("none", "none (not a debate method)"));
    FILTERS.forEach(function (k) {
      control(k).addEventListener(k === "text" ? "input" : "change", function () {
        document.getElementById("filter-note").textContent = "";
        applyFilters(); renderHead(); writeFragment(); });
    });
  }

  // ------------------------------------------------------------------ the question list
  function outcome(q, m) { return (q.methods || {})[m] || null; }
  function renderHead() {
    var m = control("method").value;
    var cells = ["id", "task", "seed", "gold", "round-0"];
    if (DATA.kind === "eval") cells = cells.concat(m ? ["answer", "outcome", "stop round"] : ["methods correct"]);
    var head = document.querySelector("#questions thead");
    head.textContent = "";
    head.appendChild(el("tr", {}, cells.map(function (c) { return el("th", { text: c }); })));
    rows.forEach(function (row) { fillRow(row.tr, row.q, m); });
  }
  function fillRow(tr, q, m) {
    tr.textContent = "";
    var disagree = q.disagree0 === null ? "-" : q.disagree0 ? "disagree" : "agree";
    [q.id, q.task, String(q.seed), show(q.gold), disagree].forEach(function (t) { tr.appendChild(el("td", { text: t })); });
    if (DATA.kind !== "eval") return;
    if (m) {
      var o = outcome(q, m);
      tr.appendChild(el("td", { text: o ? show(o.final_answer) : "-" }));
      tr.appendChild(el("td", {}, [verdict(o ? o.correct : null)]));
      tr.appendChild(el("td", { text: o ? show(o.stop_round) : "-" }));
    } else {
      var ms = Object.keys(q.methods || {});
      var ok = ms.filter(function (k) { return q.methods[k].correct === true; }).length;
      tr.appendChild(el("td", { text: ok + "/" + ms.length }));
    }
  }
  function buildList() {
    var body = document.querySelector("#questions tbody");
    DATA.questions.forEach(function (q, i) {
      var tr = el("tr", { className: "qrow", id: "q-" + i, "data-key": q.key, "data-id": q.id, "data-task": q.task, "data-seed": String(q.seed) });
      tr.addEventListener("click", function () { select(q.key); writeFragment(); });
      body.appendChild(tr);
      rows.push({ tr: tr, q: q });
    });
    document.getElementById("total-count").textContent = String(rows.length);
  }
  function matches(q, f) {
    if (f.task && q.task !== f.task) return false;
    if (f.disagree === "yes" && q.disagree0 !== true) return false;
    if (f.disagree === "no" && q.disagree0 !== false) return false;
    if (f.text) {
      var needle = f.text.toLowerCase();
      if ((q.id + "\n" + (q.question || "")).toLowerCase().indexOf(needle) < 0) return false;
    }
    if (f.method) {
      var o = outcome(q, f.method);
      if (!o) return false;
      if (f.correct === "correct" && o.correct !== true) return false;
      if (f.correct === "wrong" && o.correct !== false) return false;
      if (f.stop === "none" && o.stop_round !== null && o.stop_round !== undefined) return false;
      if (f.stop && f.stop !== "none" && String(o.stop_round) !== f.stop) return false;
    }
    return true;
  }
  function applyFilters() {
    var f = {};
    FILTERS.forEach(function (k) { f[k] = control(k).value; });
    var needsMethod = !f.method && (f.correct || f.stop);
    if (needsMethod) document.getElementById("filter-note").textContent = "choose a method: outcome and stop round are per method";
    control("correct").disabled = control("stop").disabled = !f.method;
    if (!f.method) { f.correct = ""; f.stop = ""; }
    var shown = 0;
    rows.forEach(function (row) {
      var on = matches(row.q, f);
      row.tr.hidden = !on;
      if (on) shown++;
    });
    document.getElementById("shown-count").textContent = String(shown);
  }

  // ------------------------------------------------------------------ the detail of one question
  function select(key) {
    selected = key;
    rows.forEach(function (row) { row.tr.classList.toggle("selected", row.q.key === key); });
    var q = null;
    rows.forEach(function (row) { if (row.q.key === key) q = row.q; });
    var detail = document.getElementById("detail");
    detail.textContent = "";
    if (!q) { detail.appendChild(el("p", { className: "hint", text: "no question " + key })); return; }
    detail.setAttribute("data-key", q.key);
    detail.appendChild(el("h2", { text: q.id + " (" + q.task + ", seed " + q.seed + ")" }));
    detail.appendChild(el("pre", { id: "question-text", text: show(q.question) }));
    if (q.choices) detail.appendChild(el("p", { text: "choices: " + q.choices.join(" | ") }));
    detail.appendChild(el("p", {}, ["gold answer: ", el("strong", { id: "gold", text: show(q.gold) })]));
    var methods = Object.keys(q.methods || {});
    var chosen = control("method").value;
    if (methods.length) detail.appendChild(outcomeTable(q, methods));
    if (q.debate) {
      detail.appendChild(el("h3", { text: DATA.kind !== "eval" ? "Debate" : DATA.mode === "live" ? "Debate (the longest of the debate methods' own live debates)" : "Debate (shared by the debate methods)" }));
      var shown = chosen ? [chosen] : methods;
      var pairs = shown.filter(function (m) { return q.methods[m]; }).map(function (m) { return [m, q.methods[m]]; });
      detail.appendChild(debateView(q.debate, pairs, chosen && q.methods[chosen] ? chosen : null));
    }
    methods.forEach(function (m) {
      var o = q.methods[m];
      if (chosen && m !== chosen) return;
      if (o.loop) {
        detail.appendChild(el("h3", { text: "Own loop of " + label(m) }));
        detail.appendChild(tree(o.loop, "trace", true));
      }
      if (o.texts && o.texts.length) {
        var box = el("details", { className: "texts", "data-method": m }, [el("summary", { text: label(m) + ": " + o.texts.length + " output(s)" })]);
        o.texts.forEach(function (t) { box.appendChild(el("pre", { text: t })); });
        detail.appendChild(box);
      }
    });
    if (q.loop) { detail.appendChild(el("h3", { text: "Loop trace" })); detail.appendChild(tree(q.loop, "trace", true)); }
  }
  function tokensText(t) {
    // {"debater_prompt": 10, "debater_completion": 5, ...} -> "debater 10/5, ..." (prompt/completion per role)
    if (!t) return "-";
    var roles = [], parts = {};
    Object.keys(t).forEach(function (k) {
      var m = /^(.*)_(prompt|completion)$/.exec(k);
      if (!m || typeof t[k] !== "number") { roles.push(k); parts[k] = { raw: JSON.stringify(t[k]) }; return; }
      if (!parts[m[1]]) { roles.push(m[1]); parts[m[1]] = {}; }
      parts[m[1]][m[2]] = t[k];
    });
    return roles.filter(function (r) { return parts[r].raw !== undefined || parts[r].prompt || parts[r].completion; })
      .map(function (r) { return parts[r].raw !== undefined ? r + " " + parts[r].raw : r + " " + show(parts[r].prompt) + "/" + show(parts[r].completion); })
      .join(", ") || "0";
  }
  function outcomeTable(q, methods) {
    var head = el("tr", {}, ["method", "final answer", "outcome", "stop round", "rounds", "tokens (prompt/completion)", "memory items"].map(function (c) { return el("th", { text: c }); }));
    var table = el("table", { id: "outcomes" }, [head]);
    methods.forEach(function (m) {
      var o = q.methods[m];
      table.appendChild(el("tr", { "data-method": m, className: m === control("method").value ? "chosen" : "" }, [
        el("td", { text: label(m) }), el("td", { text: show(o.final_answer) }), el("td", {}, [verdict(o.correct)]),
        el("td", { text: show(o.stop_round) }), el("td", { text: show(o.rounds) }), el("td", { text: tokensText(o.tokens) }),
        el("td", { text: o.memory_items ? (o.memory_items.length ? o.memory_items.join(", ") : "none") : "-" }),
      ]));
    });
    return table;
  }
  function debateView(debate, methodOutcomes, chosen) {
    // chosen: the method whose stop round dims the later rounds (it never saw them)
    var box = el("div", { className: "debate" });
    var stopAt = chosen ? ((methodOutcomes.filter(function (p) { return p[0] === chosen; })[0] || [null, {}])[1].stop_round) : null;
    debate.rounds.forEach(function (rnd) {
      var after = stopAt !== null && stopAt !== undefined && rnd.round > stopAt;
      var toks = rnd.prompt_tokens === undefined || rnd.prompt_tokens === null ? "" : "  ·  tokens " + rnd.prompt_tokens + " prompt / " + rnd.completion_tokens + " completion";
      var title = "Round " + rnd.round + "  ·  eta " + show(rnd.eta) + toks + (after ? "  ·  after " + label(chosen) + " stopped" : "");
      var section = el("div", { className: "round" + (after ? " after-stop" : ""), "data-round": String(rnd.round) }, [el("h4", { text: title })]);
      var agents = el("div", { className: "agents" });
      rnd.responses.forEach(function (r) {
        var toks = r.prompt_tokens === undefined ? "" : "  ·  tokens " + r.prompt_tokens + " prompt / " + r.completion_tokens + " completion";
        var card = el("div", { className: "agent", "data-agent": String(r.agent) }, [
          el("h5", { text: "Agent " + r.agent + "  ·  answer " + show(r.answer) + toks }),
        ]);
        if (r.text !== undefined) card.appendChild(el("pre", { text: r.text }));
        else card.appendChild(el("p", { className: "muted", text: "(no text: this run kept no transcript file)" }));
        if (r.memory_items) card.appendChild(el("p", { text: "memory items: " + (r.memory_items.length ? r.memory_items.join(", ") : "none") }));
        agents.appendChild(card);
      });
      section.appendChild(agents);
      var lines = methodOutcomes.map(function (pair) {
        var d = (pair[1].decisions || []).filter(function (x) { return x.round === rnd.round; })[0];
        if (!d) return null;
        var pstop = d.p_stop === undefined || d.p_stop === null ? "-" : Number(d.p_stop).toFixed(3);
        return el("tr", { "data-method": pair[0] }, [
          el("td", { text: label(pair[0]) }),
          el("td", { className: d.stop ? "stop" : "continue", text: d.stop ? "STOP" : "CONTINUE" }),
          el("td", { text: show(d.answer) }), el("td", { text: d.valid === null || d.valid === undefined ? "-" : d.valid ? "yes" : "no" }),
          el("td", { className: "p-stop", text: pstop }), el("td", { text: show(d.raw) }),
        ]);
      }).filter(Boolean);
      if (lines.length) {
        var head = el("tr", {}, ["method", "decision", "answer", "format-valid", "P(STOP)", "raw output"].map(function (c) { return el("th", { text: c }); }));
        section.appendChild(el("div", { className: "decisions" }, [el("table", {}, [head].concat(lines))]));
      }
      box.appendChild(section);
    });
    if (debate.stop_reason) box.appendChild(el("p", { className: "muted", text: "debate ended: " + debate.stop_reason }));
    return box;
  }
  // a loop trace (MRO, MARCO) as nested details; its steps (history / iterations) and all within them open, the
  // rest (settings, meta, roles) folded
  var STEP_KEYS = { history: true, iterations: true };
  function tree(value, name, open, inStep) {
    if (value === null || typeof value !== "object") {
      var text = show(value);
      if (typeof value === "string" && (value.indexOf("\n") >= 0 || value.length > 80)) return el("div", {}, [name + ":", el("pre", { text: value })]);
      return el("div", { text: name + ": " + text });
    }
    var keys = Object.keys(value);
    var box = el("details", open ? { open: "" } : {}, [el("summary", { text: name + (Array.isArray(value) ? " [" + keys.length + "]" : "") })]);
    var inner = el("div", { style: "margin-left: 1rem" });
    var childInStep = inStep === true || (STEP_KEYS[name] === true && Array.isArray(value));
    keys.forEach(function (k) { inner.appendChild(tree(value[k], k, childInStep || STEP_KEYS[k] === true, childInStep)); });
    box.appendChild(inner);
    return box;
  }

  // ------------------------------------------------------------------ start
  function fromFragment() {
    var frag = readFragment();
    document.getElementById("filter-note").textContent = "";
    FILTERS.forEach(function (k) { setControl(k, frag[k]); });
    applyFilters();
    renderHead();
    if (frag.q) select(frag.q);
  }
  var info = DATA.kind + " run " + DATA.run_dir + (DATA.simulated ? "  ·  SIMULATED debaters" : "") + (DATA.mode ? "  ·  mode " + DATA.mode : "");
  document.getElementById("run-info").textContent = info;
  if (DATA.kind !== "eval") document.body.classList.add("rollout");
  buildControls();
  buildList();
  fromFragment();
  window.addEventListener("hashchange", fromFragment);
})();
