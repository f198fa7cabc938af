// The notebooks' key figures, drawn again with the site's own plotly.js: zoom, exact values
// on hover, legend entries that hide their curve. minigrad.studies.interactive.publish
// gave each figure's data (the notebook's own numbers, labels and scales) and
// docs_hooks/notebooks.py put it in a <div class="minigrad-figure" data-figure="...">, with
// the notebook's PNG below it in a closed "static figure" toggle. Each panel is a graph of
// its own, side by side where the page is wide enough, one under another where it is not.
(function () {
  "use strict";

  var PLOTLY = new URL("../assets/plotly/plotly.min.js", document.currentScript.src).href;
  var CONFIG = { displaylogo: false, responsive: true,
                 modeBarButtonsToRemove: ["select2d", "lasso2d"] };

  function element(tag, style, text) {
    var node = document.createElement(tag);
    node.setAttribute("style", style);
    if (text) node.innerHTML = text;  // the figure's text, escaped by publish
    return node;
  }

  // A line of the figure in Plotly's terms; black takes the palette's text colour.
  function lineStyle(series, trace, fg) {
    var colour = series.colour === "#000000" ? fg : series.colour;
    var modes = [];
    if (series.dash) modes.push("lines");
    if (series.marker || !series.dash) modes.push("markers");
    trace.mode = modes.join("+");
    trace.line = { color: colour, dash: series.dash || "solid" };
    trace.marker = { color: colour, symbol: series.marker || "circle", size: 7 };
    // a line symbol (matplotlib's "_", a tick mark) is drawn by its outline only
    if (/^line-/.test(trace.marker.symbol)) {
      Object.assign(trace.marker, { size: 24, line: { color: colour, width: 2.5 } });
    }
  }

  // A position on x as the reader reads it: the figure's tick label there, if it set one
  // (bars at 0, 1, 2 ... labelled with micro-batch sizes), else the number itself.
  function xText(panel) {
    var labels = {};
    if (panel.x.ticks) {
      panel.x.ticks.values.forEach(function (v, i) { labels[v] = panel.x.ticks.labels[i]; });
    }
    return function (x) { return x in labels ? labels[x] : String(x); };
  }

  function traces(panel, fg) {
    var xOf = xText(panel);
    return panel.series.map(function (series) {
      var trace = {
        type: series.kind === "bar" ? "bar" : "scatter",
        name: series.label || "", showlegend: series.label !== null,
        x: series.x, y: series.y,
        // the numbers as the notebook computed them: JavaScript's shortest exact form
        customdata: series.x.map(function (x, i) { return [xOf(x), String(series.y[i])]; }),
        hovertemplate: "<b>" + (series.label || "") + "</b><br>" + panel.x.label +
          ": %{customdata[0]}<br>" + panel.y.label + ": %{customdata[1]}<extra></extra>",
      };
      if (series.kind === "bar") {
        trace.base = series.base;
        trace.width = series.width;
        trace.marker = { color: series.colour };
      } else {
        lineStyle(series, trace, fg);
      }
      return trace;
    });
  }

  function axis(spec) {
    var a = { type: spec.scale, title: { text: spec.label } };
    if (spec.scale === "log") a.exponentformat = "power";
    if (spec.ticks) {
      a.tickvals = spec.ticks.values;
      a.ticktext = spec.ticks.labels;
    }
    return a;
  }

  // The legend goes under the panel; the graph grows by a line per entry line.
  function layout(panel) {
    var lines = panel.series.reduce(function (n, series) {
      return n + (series.label === null ? 0 : series.label.split("<br>").length);
    }, 0);
    return window.minigradPlotly.layout({
      xaxis: axis(panel.x), yaxis: axis(panel.y), barmode: "overlay",
      height: 330 + 19 * lines, margin: { l: 60, r: 10, t: 10, b: 10 },
      legend: { orientation: "v", x: 0, xanchor: "left", y: 0, yanchor: "bottom",
                yref: "container", font: { size: 11 } },
    });
  }

  function mount(root) {
    if (root.dataset.mounted) return;
    root.dataset.mounted = "true";
    var figure = JSON.parse(root.dataset.figure);
    window.minigradPlotly.load(PLOTLY).then(function (Plotly) {
      var row = element("div", "display: flex; flex-wrap: wrap; gap: 0.5rem 1.5rem;");
      var graphs = figure.panels.map(function (panel) {
        var graph = element("div", "");
        graph.className = "minigrad-figure-graph";
        row.appendChild(element("div", "flex: 1 1 340px; min-width: 0;")).append(
          element("p", "margin: 0; text-align: center; font-weight: bold;", panel.title),
          graph);
        return graph;
      });
      root.replaceChildren(row);
      if (figure.title) root.prepend(element("p", "margin: 0 0 0.5rem;", figure.title));
      function draw() {
        return Promise.all(figure.panels.map(function (panel, i) {
          var l = layout(panel);
          return Plotly.react(graphs[i], traces(panel, l.font.color), l, CONFIG);
        }));
      }
      draw().then(function () { root.dataset.state = "drawn"; });
      // Redraw in the other palette's colours when the reader switches light and dark.
      new MutationObserver(draw).observe(document.body, {
        attributes: true, attributeFilter: ["data-md-color-scheme"] });
    }).catch(function (error) {
      root.dataset.state = "failed";
      throw error;
    });
  }

  function mountAll() {
    document.querySelectorAll(".minigrad-figure").forEach(mount);
  }

  // Material's instant navigation swaps pages without a reload; document$ fires for each.
  if (typeof document$ !== "undefined") {
    document$.subscribe(mountAll);
  } else {
    document.addEventListener("DOMContentLoaded", mountAll);
  }
})();
