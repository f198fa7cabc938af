// The interactive explorers of the Concepts pages (docs_hooks/explorers.py puts them there).
// minigrad cannot run in the browser (NumPy has no WebAssembly build), so every number here
// was computed by minigrad when the site was built: a grid of cases, one per combination of
// the controls (minigrad/analysis/explorers.py), looked up as the controls move. The memory
// planner evaluates instead the formula of analysis.memory.theoretical_peak from the
// constants the library exported. Figures are drawn with the site's own copy of plotly.js.
(function () {
  "use strict";

  var COLORS = ["#3f51b5", "#e65100", "#2e7d32", "#8e24aa", "#00838f", "#6d4c41"];
  var plotly = null;

  // ----- small helpers --------------------------------------------------------------------
  // A number as the tables show it: integers in full, else `digits` significant digits.
  function format(value, digits) {
    digits = digits || 3;
    var size = Math.abs(value);
    if (Number.isInteger(value) && size < 1e6) return String(value);
    if (size >= 1e-3 && size < 1e3) return value.toPrecision(digits);
    return value.toExponential(digits - 1);
  }

  // Bytes in binary units with one decimal, as analysis.planner.format_bytes writes them.
  function formatBytes(size) {
    var units = [["GiB", Math.pow(2, 30)], ["MiB", Math.pow(2, 20)], ["KiB", 1024]];
    for (var i = 0; i < units.length; i++) {
      if (size >= units[i][1]) return (size / units[i][1]).toFixed(1) + " " + units[i][0];
    }
    return size + " B";
  }

  function element(tag, attributes, children) {
    var node = document.createElement(tag);
    Object.keys(attributes || {}).forEach(function (name) {
      node.setAttribute(name, attributes[name]);
    });
    (children || []).forEach(function (child) {
      node.appendChild(typeof child === "string" ? document.createTextNode(child) : child);
    });
    return node;
  }

  // A table cell: text, and where it shows a number, that number exactly in data-value.
  function cell(text, value) {
    return value === undefined ? { text: text } : { text: text, value: value };
  }

  function num(value, digits) {
    return cell(format(value, digits), value);
  }

  function table(host, header, rows) {
    var head = element("tr", {}, header.map(function (h) { return element("th", {}, [h]); }));
    var body = rows.map(function (row) {
      return element("tr", { "data-row": row.key }, row.cells.map(function (c, i) {
        var attributes = { "data-col": String(i) };
        if (c.value !== undefined) attributes["data-value"] = String(c.value);
        return element("td", attributes, [c.text]);
      }));
    });
    host.replaceChildren(element("table", {}, [element("thead", {}, [head]),
                                               element("tbody", {}, body)]));
  }

  function loadPlotly(src) {
    if (window.Plotly) return Promise.resolve(window.Plotly);
    if (!plotly) {
      plotly = new Promise(function (resolve, reject) {
        var script = element("script", { src: src });
        script.onload = function () { resolve(window.Plotly); };
        script.onerror = function () { reject(new Error("could not load " + src)); };
        document.head.appendChild(script);
      });
    }
    return plotly;
  }

  // Colours of the current palette (Material's light or dark scheme).
  function layoutBase(extra) {
    var style = getComputedStyle(document.body);
    var fg = style.getPropertyValue("--md-default-fg-color").trim() || "#333";
    var grid = style.getPropertyValue("--md-default-fg-color--lightest").trim() || "#ddd";
    var axis = { gridcolor: grid, zerolinecolor: grid, linecolor: grid, automargin: true };
    var layout = {
      paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)",
      font: { color: fg, size: 12 }, colorway: COLORS,
      margin: { l: 60, r: 10, t: 10, b: 50 }, height: 360,
      legend: { orientation: "h", x: 0, y: 1.02, yanchor: "bottom" }, hovermode: "closest",
    };
    Object.keys(extra).forEach(function (name) {
      layout[name] = /^[xy]axis/.test(name) ? Object.assign({}, axis, extra[name]) : extra[name];
    });
    return layout;
  }

  // A log axis has no place for zero (a bitwise-equal result): it is left out, a gap.
  function logged(values) {
    return values.map(function (v) { return v === 0 ? null : v; });
  }

  function marker(axis, x) {
    return { type: "line", xref: axis, yref: "paper", x0: x, x1: x, y0: 0, y1: 1,
             line: { dash: "dot", width: 1, color: "#9e9e9e" } };
  }

  // Two panels side by side over the micro-batch sizes ms (log axis), the chosen m marked
  // in both; yaxis and yaxis2 are the left and right panels' vertical axes.
  function microBatchPanels(ms, m, yaxis, yaxis2) {
    function sizes() {
      return { type: "log", tickvals: ms, title: { text: "micro-batch size m" } };
    }
    return { grid: { rows: 1, columns: 2, pattern: "independent" }, height: 400,
             xaxis: sizes(), yaxis: yaxis, xaxis2: sizes(), yaxis2: yaxis2,
             shapes: [marker("x", m), marker("x2", m)] };
  }

  // ----- the controls ---------------------------------------------------------------------
  // Numeric values get a slider over their positions, names a select.
  function gridControl(spec, index, onChange) {
    var id = "explorer-control-" + Math.random().toString(36).slice(2);
    var numeric = spec.values.every(function (v) { return typeof v === "number"; });
    var shown = element("output", { for: id }, [spec.labels[index]]);
    var input;
    if (numeric) {
      input = element("input", { type: "range", id: id, min: "0", step: "1",
                                 max: String(spec.values.length - 1), value: String(index),
                                 "data-control": spec.name });
    } else {
      input = element("select", { id: id, "data-control": spec.name },
                      spec.labels.map(function (label, i) {
                        return element("option", { value: String(i) }, [label]);
                      }));
      input.value = String(index);
    }
    input.addEventListener("input", function () {
      shown.textContent = spec.labels[Number(input.value)];
      onChange(spec.name, Number(input.value));
    });
    var label = element("label", { for: id }, [spec.label + " "]);
    if (numeric) label.appendChild(shown);
    return element("div", { class: "explorer-control" }, [label, input]);
  }

  // ----- the explorers --------------------------------------------------------------------
  // Each: defaults (control name -> value), and render(data, state, parts) returning the
  // figure's traces and layout after filling the tables and notes.
  var EXPLORERS = {};

  EXPLORERS.split = {
    defaults: { batch: 12, micro: 5, ignored: 0.25 },
    render: function (data, state, parts) {
      var c = data.cases[state.key];
      var x = c.sizes.map(function (_, j) { return j + 1; });
      var rules = [["textbook", "textbook: 1/k"], ["items", "item-weighted: n_j / n"]];
      table(parts.tables[0], ["rule", "max relative error of the gradient vs full batch"],
            [{ key: "micro_batch_mean", cells: [cell("textbook (mean per micro-batch / k)"),
                                                num(c.max_rel.micro_batch_mean)] },
             { key: "items", cells: [cell("item-weighted (sum / n)"), num(c.max_rel.items)] }]);
      table(parts.tables[1], ["micro-batch j", "samples", "items n_j", "share, textbook",
                              "share, item-weighted"],
            x.map(function (j, i) {
              return { key: String(j), cells: [
                num(j), num(c.sizes[i]), num(c.items[i]),
                cell(c.shares.textbook[i].text, c.shares.textbook[i].value),
                cell(c.shares.items[i].text, c.shares.items[i].value)] };
            }));
      return {
        traces: rules.map(function (rule) {
          return { type: "bar", name: rule[1], x: x,
                   y: c.shares[rule[0]].map(function (s) { return s.value; }) };
        }),
        layout: { barmode: "group", xaxis: { title: { text: "micro-batch j" }, dtick: 1 },
                  yaxis: { title: { text: "share of the accumulated gradient" } } },
      };
    },
  };

  var NORMS = [["batch", "BatchNorm (micro-batch statistics)"],
               ["exact", "BatchNorm, exact mode"], ["group", "GroupNorm"],
               ["layer", "LayerNorm"]];

  EXPLORERS.batchnorm = {
    defaults: { batch: 64, micro: 8, momentum: 0.1 },
    render: function (data, state, parts) {
      var c = data.cases[state.key];
      var sizes = data.controls[1].values;
      var along = sizes.map(function (_, j) {
        return data.cases[[state.index.batch, j, state.index.momentum].join("|")];
      });
      table(parts.tables[0], ["layer", "gradient relative error", "gradient cosine",
                              "running mean drift", "running variance drift"],
            NORMS.map(function (norm) {
              var row = c.rows[norm[0]];
              var drift = ["running_mean", "running_var"].map(function (stat) {
                return stat in row ? num(row[stat]) : cell("no running statistics");
              });
              return { key: norm[0], cells: [cell(norm[1]), num(row.rel_error),
                                              num(row.cosine, 6)].concat(drift) };
            }));
      parts.note.textContent = "Micro-batches of " + c.sizes.join(", ") + "; drift after " +
        data.updates + " SGD updates (relative to the full-batch statistics).";
      var traces = NORMS.map(function (norm) {
        return { name: norm[1], x: sizes, mode: "lines+markers",
                 y: logged(along.map(function (a) { return a.rows[norm[0]].rel_error; })) };
      });
      [["batch", "running_var", "BatchNorm: running variance"],
       ["exact", "running_var", "exact mode: running variance"],
       ["batch", "running_mean", "BatchNorm: running mean"],
       ["exact", "running_mean", "exact mode: running mean"]].forEach(function (d, i) {
        traces.push({ name: d[2], x: sizes, mode: "lines+markers", xaxis: "x2", yaxis: "y2",
                      line: { dash: i < 2 ? "solid" : "dash", color: COLORS[i % 2] },
                      y: logged(along.map(function (a) { return a.rows[d[0]][d[1]]; })) });
      });
      var m = sizes[state.index.micro];
      return {
        traces: traces,
        layout: microBatchPanels(sizes, m,
          { type: "log", exponentformat: "power", title: { text: "gradient relative error" } },
          { type: "log", exponentformat: "power", title: { text: "running-statistics drift" } }),
      };
    },
  };

  EXPLORERS["step-accounting"] = {
    defaults: { optimizer: "adamw", mistake: "adam_count", micro: 4 },
    render: function (data, state, parts) {
      var c = data.cases[state.key];
      var updates = c.bound.map(function (_, u) { return u + 1; });
      var mistake = data.controls[1].labels[state.index.mistake];
      parts.note.textContent = c.refused ? "Refused by minigrad: " + c.refused : "";
      var header = ["update", "rounding bound", "gap, minigrad's accumulation",
                    "its gap / bound"];
      if (!c.refused) header = header.concat(["gap, " + mistake + " per micro-batch",
                                              "its gap / bound"]);
      table(parts.tables[0], header, updates.map(function (u, i) {
        var cells = [num(u), num(c.bound[i]), num(c.accumulated[i]),
                     num(c.accumulated_ratio[i])];
        if (!c.refused) cells = cells.concat([num(c.mistake[i]), num(c.mistake_ratio[i])]);
        return { key: String(u), cells: cells };
      }));
      var traces = [
        { name: "rounding bound", x: updates, y: logged(c.bound), mode: "lines",
          line: { dash: "dash", color: "#757575" } },
        { name: "minigrad's accumulation", x: updates, y: logged(c.accumulated),
          mode: "lines+markers", line: { color: COLORS[2] } },
      ];
      if (!c.refused) {
        traces.push({ name: mistake + " per micro-batch", x: updates, y: logged(c.mistake),
                      mode: "lines+markers", line: { color: COLORS[1] } });
      }
      return {
        traces: traces,
        layout: { xaxis: { title: { text: "update" }, dtick: 1 },
                  yaxis: { type: "log", exponentformat: "power",
                           title: { text: "max |θ − θ_full|" } } },
      };
    },
  };

  EXPLORERS["floating-point"] = {
    defaults: { dtype: "float64", micro: 5 },
    render: function (data, state, parts) {
      var c = data.cases[state.key];
      var ks = data.controls[1].values;
      var along = ks.map(function (_, j) { return data.cases[state.index.dtype + "|" + j]; });
      parts.note.textContent = "Micro-batches of " + c.sizes.join(", ") + " samples.";
      table(parts.tables[0], ["quantity", "value"], [
        ["gap", "largest gap |g_acc − g_full|", c.gap],
        ["bound", "largest entry of the bound", c.bound],
        ["ratio", "largest gap / bound, elementwise", c.ratio],
        ["max_ulp", "largest ULP distance, elementwise", c.max_ulp],
        ["gap_ulps", "largest gap in ULPs of max |g_full|", c.gap_ulps],
        ["bound_ulps", "bound in ULPs of max |g_full|", c.bound_ulps],
      ].map(function (r) { return { key: r[0], cells: [cell(r[1]), num(r[2])] }; }));
      var k = ks[state.index.micro];
      return {
        traces: [
          { name: "gap (ULPs of max |g_full|)", x: ks, mode: "lines+markers",
            y: logged(along.map(function (a) { return a.gap_ulps; })) },
          { name: "bound (ULPs of max |g_full|)", x: ks, mode: "lines",
            line: { dash: "dash" }, y: logged(along.map(function (a) { return a.bound_ulps; })) },
          { name: "largest ULP distance, elementwise", x: ks, mode: "lines+markers",
            y: logged(along.map(function (a) { return a.max_ulp; })) },
        ],
        layout: { xaxis: { title: { text: "micro-batches k" } },
                  yaxis: { type: "log", exponentformat: "power", title: { text: "ULPs" } },
                  shapes: [marker("x", k)] },
      };
    },
  };

  // A number, or (null: none was computed) the reason in words.
  function numOr(value, reason) {
    return value === null ? cell(reason) : num(value);
  }

  EXPLORERS.contrastive = {
    defaults: { strategy: "gradcache", micro: 4, batch: 32 },
    render: function (data, state, parts) {
      var c = data.cases[state.key];
      var strategies = data.controls[0];
      var ms = data.controls[1].values;
      var traces = [];
      strategies.values.forEach(function (_, s) {
        var along = ms.map(function (_, j) {
          return data.cases[[s, j, state.index.batch].join("|")];
        });
        var width = s === state.index.strategy ? 3 : 1.5;
        traces.push({ name: strategies.labels[s], x: ms, mode: "lines+markers",
                      line: { color: COLORS[s], width: width },
                      y: logged(along.map(function (a) { return a.rel_error; })) });
        traces.push({ name: strategies.labels[s] + ": negatives", x: ms,
                      mode: "lines+markers", xaxis: "x2", yaxis: "y2", showlegend: false,
                      line: { color: COLORS[s], width: width },
                      y: along.map(function (a) { return a.negatives; }) });
      });
      parts.note.textContent = "Micro-batches of " + c.sizes.join(", ") + " pairs.";
      table(parts.tables[0], ["quantity", "value"], [
        { key: "negatives", cells: [cell("negatives per query"), num(c.negatives)] },
        { key: "rel_error", cells: [cell("relative gradient gap |g − g_full| / |g_full|"),
                                    num(c.rel_error)] },
        { key: "cosine", cells: [cell("cosine to the full-batch gradient"),
                                 num(c.cosine, 6)] },
        { key: "bound_ratio", cells: [cell("largest gap / GradCache's rounding bound"),
                                      numOr(c.bound_ratio, "no finite ratio")] },
      ]);
      var m = ms[state.index.micro];
      return {
        traces: traces,
        layout: microBatchPanels(ms, m,
          { type: "log", exponentformat: "power", title: { text: "relative gradient gap" } },
          { rangemode: "tozero", title: { text: "negatives per query" } }),
      };
    },
  };

  EXPLORERS.precision = {
    defaults: { k: 64, dtype: "float16", accumulate: "param", order: "sum_then_divide" },
    render: function (data, state, parts) {
      var c = data.cases[state.key];
      var ks = data.controls[0].values;
      var accumulators = data.controls[2];
      var along = function (a) {
        return ks.map(function (_, j) {
          return data.cases[[j, state.index.dtype, a, state.index.order].join("|")];
        });
      };
      var traces = accumulators.values.map(function (name, a) {
        return { name: "accumulator " + accumulators.labels[a], x: ks, mode: "lines+markers",
                 line: { color: COLORS[a], width: a === state.index.accumulate ? 3 : 1.5 },
                 y: logged(along(a).map(function (r) { return r.relative_error; })) };
      });
      if (c.model !== null) {
        traces.push({ name: "model u√(K/6), " + accumulators.labels[state.index.accumulate],
                      x: ks, mode: "lines", line: { dash: "dash", color: "#757575" },
                      y: along(state.index.accumulate).map(function (r) { return r.model; }) });
      }
      table(parts.tables[0], ["quantity", "value"], [
        { key: "relative_error", cells: [cell("rms error / rms exact mean"),
                                         numOr(c.relative_error, "overflow")] },
        { key: "bound_ratio", cells: [cell("largest error / its worst-case bound"),
                                      numOr(c.bound_ratio, "no bound")] },
        { key: "model", cells: [cell("statistical model u √(K/6)"),
                                numOr(c.model, "not modelled (Kahan)")] },
        { key: "flushed", cells: [cell("share of terms flushed to zero"), num(c.flushed)] },
      ]);
      return {
        traces: traces,
        layout: { xaxis: { type: "log", tickvals: ks, title: { text: "micro-batches K" } },
                  yaxis: { type: "log", exponentformat: "power",
                           title: { text: "relative error of the window's mean" } },
                  shapes: [marker("x", ks[state.index.k])] },
      };
    },
  };

  EXPLORERS.tokens = {
    defaults: { micro: 3, spread: 4, rule: "textbook" },
    render: function (data, state, parts) {
      var c = data.cases[state.key];
      var ms = data.controls[0].values;
      var rules = data.controls[2];
      var rule = rules.labels[state.index.rule];
      var x = c.sizes.map(function (_, j) { return j + 1; });
      var along = function (r) {
        return ms.map(function (_, i) {
          return data.cases[[i, state.index.spread, r].join("|")];
        });
      };
      parts.note.textContent = "Micro-batches of " + c.sizes.join(", ") + " names, holding " +
        c.tokens.join(", ") + " tokens.";
      table(parts.tables[0], ["quantity", "value"], [
        { key: "max_rel", cells: [cell("gradient error against the full-batch token mean"),
                                  num(c.max_rel)] },
        { key: "own_max_rel", cells: [cell("gradient error against the full batch of the " +
                                           "rule's own loss"), num(c.own_max_rel)] },
        { key: "limit", cells: [cell("the most rounding may give there (the bound)"),
                                num(c.limit)] },
      ]);
      table(parts.tables[1], ["micro-batch j", "names", "tokens n_j", "share of the tokens",
                              "share of the gradient, " + rule],
            x.map(function (j, i) {
              return { key: String(j), cells: [
                num(j), num(c.sizes[i]), num(c.tokens[i]),
                cell(c.shares.tokens[i].text, c.shares.tokens[i].value),
                cell(c.shares.rule[i].text, c.shares.rule[i].value)] };
            }));
      var share = function (name) {
        return c.shares[name].map(function (s) { return s.value; });
      };
      var traces = [
        { type: "bar", name: "share of the tokens (n_j / n)", x: x, y: share("tokens") },
        { type: "bar", name: "share of the gradient, " + rule, x: x, y: share("rule") },
      ];
      rules.values.forEach(function (_, r) {
        traces.push({ name: "error, " + rules.labels[r], x: ms, mode: "lines+markers",
                      xaxis: "x2", yaxis: "y2",
                      line: { color: COLORS[r + 2], width: r === state.index.rule ? 3 : 1.5 },
                      y: logged(along(r).map(function (a) { return a.max_rel; })) });
      });
      traces.push({ name: "rounding bound, " + rule, x: ms, mode: "lines", xaxis: "x2",
                    yaxis: "y2", line: { dash: "dash", color: "#757575" },
                    y: along(state.index.rule).map(function (a) { return a.limit; }) });
      return {
        traces: traces,
        layout: { grid: { rows: 1, columns: 2, pattern: "independent" }, height: 400,
                  barmode: "group",
                  xaxis: { dtick: 1, title: { text: "micro-batch j" } },
                  yaxis: { rangemode: "tozero", title: { text: "share" } },
                  xaxis2: { type: "log", tickvals: ms, title: { text: "micro-batch size m" } },
                  yaxis2: { type: "log", exponentformat: "power",
                            title: { text: "error vs the full-batch token mean" } },
                  shapes: [marker("x2", ms[state.index.micro])] },
      };
    },
  };

  // ----- the memory planner: analysis.memory.theoretical_peak, evaluated here -------------
  function splitSizes(n, m) {
    var sizes = [];
    for (var start = 0; start < n; start += m) sizes.push(Math.min(m, n - start));
    return sizes;
  }

  function sum(values) {
    return values.reduce(function (a, b) { return a + b; }, 0);
  }

  // The peak extra bytes of one update over micro-batches of `sizes` (see the docstring of
  // theoretical_peak for each moment), with the parameters' bytes q in the optimizer's order.
  function theoreticalPeak(f, widths, dtype, optimizer, loss, sizes) {
    var s = f.itemsize[dtype];
    var opt = f.optimizers[optimizer];
    var hidden = widths.slice(1, -1);
    var outs = widths.slice(1);
    var classes = widths[widths.length - 1];
    var grads = [];
    var params = [];
    for (var i = 0; i + 1 < widths.length; i++) {
      params.push(s * widths[i] * widths[i + 1], s * widths[i + 1]);
      grads.push(s * (widths[i] * widths[i + 1] + widths[i + 1]));
    }
    var total = sum(grads);
    var largest = Math.max.apply(null, params);
    // the update, in place: the sums, the workspace (t arrays of the largest parameter's
    // size, at most f.chunk values) and the state its first update makes (r arrays of each
    // parameter's size)
    var peak = total + opt.t * Math.min(largest, s * f.chunk) + opt.r * total;
    var seen = {};
    sizes.forEach(function (n, j) {
      var later = j > 0;
      if (seen[n + "|" + later]) return;
      seen[n + "|" + later] = true;
      var walk = [n * s * (2 * sum(hidden) + f.head[loss] * classes)];
      hidden.forEach(function (d, l) {
        var below = 2 * sum(hidden.slice(0, l));
        var above = sum(grads.slice(l + 1));
        walk.push(n * s * (below + 4 * d + classes) + above);
        walk.push(n * s * (below + 3 * d + 2 * outs[l + 1] + classes) + above);
      });
      var end = (later ? 2 * total + largest : total) + n * s * classes;
      peak = Math.max(peak, (later ? total : 0) + Math.max.apply(null, walk), end);
    });
    return { peak: peak, parameters: total, state: opt.state * total };
  }

  function powersOfTwo(n) {
    var values = [];
    for (var v = 1; v <= n; v *= 2) values.push(v);
    return values;
  }

  function parseSizes(text) {
    var parts = text.split(",").map(function (p) { return p.trim(); });
    var ok = parts.length >= 2 && parts.every(function (p) { return /^[1-9][0-9]*$/.test(p); });
    return ok ? parts.map(Number) : null;
  }

  EXPLORERS.memory = {
    defaults: { batch: 2048, optimizer: "adam", dtype: "float64", loss: "cross_entropy",
                budget: 16 * Math.pow(2, 20) },
    render: function (data, state, parts) {
      var f = data.formula;
      var widths = parseSizes(state.value.sizes);
      if (!widths) {
        parts.note.textContent = "layer sizes must list at least 2 positive integers " +
          "separated by commas, got '" + state.value.sizes + "'";
        parts.tables[0].replaceChildren();
        return null;
      }
      var n = state.value.batch;
      var budget = state.value.budget;
      var args = [f, widths, state.value.dtype, state.value.optimizer, state.value.loss];
      var ms = [];
      var peaks = [];
      var chosen = null;
      for (var m = 1; m <= n; m++) {
        var p = theoreticalPeak.apply(null, args.concat([splitSizes(n, m)])).peak;
        ms.push(m);
        peaks.push(p);
        if (p <= budget) chosen = m;
      }
      var full = theoreticalPeak.apply(null, args.concat([[n]]));
      var columns = [["full", "full batch", n, full]];
      if (chosen !== null) {
        var k = splitSizes(n, chosen).length;
        columns.unshift(["chosen", "m = " + chosen, chosen,
                         theoreticalPeak.apply(null, args.concat([splitSizes(n, chosen)]))]);
        parts.note.textContent = "The planner's choice: micro_batch_size=" + chosen + ", " + k +
          " micro-batch" + (k > 1 ? "es" : "") + " of a global batch of " + n + ".";
      } else {
        var least = Math.min.apply(null, peaks);
        parts.note.textContent = "No micro-batch size fits " + formatBytes(budget) +
          ": the smallest predicted peak is " + formatBytes(least) + " (at micro_batch_size=" +
          (peaks.indexOf(least) + 1) + ").";
      }
      var partsOf = function (r) {
        var activations = Math.max(0, r.peak - 2 * r.parameters - r.state);
        return { parameters: r.parameters, gradients: r.parameters, state: r.state,
                 activations: activations, peak: r.peak };
      };
      var rows = [["parameters", "parameters"], ["gradients", "gradients"],
                  ["state", "optimizer state"], ["activations", "activations and temporaries"],
                  ["peak", "predicted peak"]];
      table(parts.tables[0], ["part"].concat(columns.map(function (c) { return c[1]; })),
            rows.map(function (row) {
              return { key: row[0], cells: [cell(row[1])].concat(columns.map(function (c) {
                var value = partsOf(c[3])[row[0]];
                return cell(formatBytes(value), value);
              })) };
            }));
      var mib = Math.pow(2, 20);
      var traces = [
        { name: "predicted peak", x: ms, y: peaks.map(function (p) { return p / mib; }),
          mode: "lines" },
        { name: "budget", x: [1, n], y: [budget / mib, budget / mib], mode: "lines",
          line: { dash: "dash", color: "#757575" } },
      ];
      if (chosen !== null) {
        traces.push({ name: "chosen m", x: [chosen], y: [peaks[chosen - 1] / mib],
                      mode: "markers", marker: { size: 11, color: COLORS[1] } });
      }
      rows.slice(0, 4).forEach(function (row, i) {
        traces.push({ type: "bar", name: row[1], xaxis: "x2", yaxis: "y2",
                      marker: { color: COLORS[(i + 2) % COLORS.length] },
                      x: columns.map(function (c) { return c[1]; }),
                      y: columns.map(function (c) { return partsOf(c[3])[row[0]] / mib; }) });
      });
      return {
        traces: traces,
        layout: {
          grid: { rows: 1, columns: 2, pattern: "independent" }, barmode: "stack",
          height: 400,
          xaxis: { type: "log", tickvals: powersOfTwo(n), title: { text: "micro-batch size m" } },
          yaxis: { rangemode: "tozero", title: { text: "predicted peak (MiB)" } },
          xaxis2: { type: "category" }, yaxis2: { title: { text: "MiB" } },
        },
      };
    },
  };

  // ----- mounting -------------------------------------------------------------------------
  function indexOf(spec, wanted) {
    var i = spec.values.indexOf(wanted);
    return i < 0 ? 0 : i;
  }

  function mount(root) {
    var explorer = EXPLORERS[root.dataset.explorer];
    if (!explorer || root.dataset.mounted) return;
    root.dataset.mounted = "true";
    Promise.all([fetch(root.dataset.src).then(function (r) {
      if (!r.ok) throw new Error(root.dataset.src + ": HTTP " + r.status);
      return r.json();
    }), loadPlotly(root.dataset.plotly)]).then(function (loaded) {
      build(root, explorer, loaded[0], loaded[1]);
    }).catch(function (error) {
      root.replaceChildren(element("p", { class: "explorer-error" },
                                   ["This explorer could not load: " + error.message]));
      throw error;
    });
  }

  function build(root, explorer, data, Plotly) {
    var state = { index: {}, value: {} };
    var controls = element("div", { class: "explorer-controls" });
    var figure = element("div", { class: "explorer-figure" });
    var note = element("p", { class: "explorer-note" });
    var tables = [element("div", { class: "explorer-table" }),
                  element("div", { class: "explorer-table explorer-table--scroll" })];
    var parts = { note: note, tables: tables };

    function update() {
      if (data.cases) {  // the grid's key: each control's position, as explorers._key
        state.key = data.controls.map(function (c) { return state.index[c.name]; }).join("|");
      }
      var drawn = explorer.render(data, state, parts);
      if (!drawn) {
        Plotly.purge(figure);
        root.dataset.state = "invalid";
        return;
      }
      var config = { displaylogo: false, responsive: true,
                     modeBarButtonsToRemove: ["select2d", "lasso2d"] };
      var drawnState = JSON.stringify(state.value);  // what this drawing shows
      Plotly.react(figure, drawn.traces, layoutBase(drawn.layout), config).then(function () {
        root.dataset.state = drawnState;
      });
    }

    data.controls.forEach(function (spec) {
      if (spec.name === "sizes") {
        state.value.sizes = spec.values[0];
        var id = "explorer-control-" + Math.random().toString(36).slice(2);
        var input = element("input", { type: "text", id: id, value: spec.values[0],
                                       "data-control": "sizes", spellcheck: "false" });
        input.addEventListener("change", function () {
          state.value.sizes = input.value;
          update();
        });
        controls.appendChild(element("div", { class: "explorer-control" }, [
          element("label", { for: id }, [spec.label]), input]));
        return;
      }
      var i = indexOf(spec, explorer.defaults[spec.name]);
      state.index[spec.name] = i;
      state.value[spec.name] = spec.values[i];
      controls.appendChild(gridControl(spec, i, function (name, j) {
        state.index[name] = j;
        state.value[name] = spec.values[j];
        update();
      }));
    });
    var main = element("div", { class: "explorer-main" }, [figure, note].concat(tables));
    root.replaceChildren(controls, main);
    update();
    // Redraw in the other palette's colours when the reader switches light and dark.
    new MutationObserver(update).observe(document.body,
                                         { attributes: true,
                                           attributeFilter: ["data-md-color-scheme"] });
  }

  function mountAll() {
    document.querySelectorAll(".minigrad-explorer").forEach(mount);
  }

  // The notebooks' figures (javascripts/figures.js) load and theme plotly.js the same way.
  window.minigradPlotly = { load: loadPlotly, layout: layoutBase };

  // Material's instant navigation swaps pages without a reload; document$ fires for each.
  if (typeof document$ !== "undefined") {
    document$.subscribe(mountAll);
  } else {
    document.addEventListener("DOMContentLoaded", mountAll);
  }
})();
