// Typeset the math of each page with the site's own KaTeX (docs_hooks/katex.py serves it).
// Markdown pages: pymdownx.arithmatex (generic) wraps math in .arithmatex as \( \) and \[ \].
// Notebook pages (mkdocs-jupyter): markdown cells keep their $ and $$ delimiters.
(function () {
  var markdown = [
    { left: "\\(", right: "\\)", display: false },
    { left: "\\[", right: "\\]", display: true },
  ];
  var notebook = [
    { left: "$$", right: "$$", display: true },
    { left: "$", right: "$", display: false },
  ].concat(markdown);

  function typeset(root) {
    root.querySelectorAll(".arithmatex").forEach(function (element) {
      renderMathInElement(element, { delimiters: markdown, throwOnError: false });
    });
    root.querySelectorAll(".jupyter-wrapper .jp-MarkdownOutput").forEach(function (element) {
      renderMathInElement(element, { delimiters: notebook, throwOnError: false });
    });
  }

  // Search results quote the pages' text, math included: typeset it as it appears.
  function watchSearch() {
    var list = document.querySelector(".md-search-result__list");
    if (!list) return;
    new MutationObserver(function () {
      renderMathInElement(list, { delimiters: markdown, throwOnError: false });
    }).observe(list, { childList: true });
  }
  document.addEventListener("DOMContentLoaded", watchSearch);

  // Material's instant navigation swaps pages without a reload; document$ fires for each.
  if (typeof document$ !== "undefined") {
    document$.subscribe(function () { typeset(document.body); });
  } else {
    document.addEventListener("DOMContentLoaded", function () { typeset(document.body); });
  }
})();
