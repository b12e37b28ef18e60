// Boxes that scroll sideways (see _static/layout.css): equations and figures wider than their
// column become Tab stops (the theme does the same for code blocks, outputs and tables), so that a
// keyboard can scroll them, while the formulas themselves are not (mathjax3_config in _config.yml);
// every such box is marked on the sides where more is hidden; multi-panel figures are marked for
// phones.
(function () {
  "use strict";
  var OWN = "div.math, span.math, div.cell_output";  // the theme makes the others Tab stops
  var BOXES = [OWN, "pre", "div.cell_output .output", ".pst-scrollable-table-container"].join(", ");

  function wide(box) {
    var overflow = getComputedStyle(box).overflowX;
    return (overflow === "auto" || overflow === "scroll") && box.scrollWidth > box.clientWidth + 1;
  }

  function mark(box) {
    var more = wide(box);
    var left = box.scrollLeft;
    box.classList.toggle("scroll-more-left", more && left > 1);
    box.classList.toggle("scroll-more-right", more && left + box.clientWidth < box.scrollWidth - 1);
  }

  function markFigure(img) {
    // Several panels side by side: at least twice as wide as tall.
    img.classList.toggle("wide-figure", img.naturalWidth >= 2 * img.naturalHeight && img.naturalHeight > 0);
  }

  // A display equation wider than its column is drawn smaller, down to MIN_FIT of MathJax's size
  // (which is about 127% of the text's: at 0.75 a formula is still as large as the text around
  // it), so that the widest equations of the course fit a desktop column; what is still too wide
  // scrolls (phones). layout.css applies --math-fit on screens only: paper has its own layout.
  var MIN_FIT = 0.75;
  function fit(box) {
    var math = box.querySelector("mjx-container > mjx-math");
    if (!math || !box.clientWidth) {
      return;
    }
    var current = parseFloat(box.style.getPropertyValue("--math-fit")) || 1;
    var natural = math.getBoundingClientRect().width / current;
    var wanted = Math.max(MIN_FIT, Math.min(1, (box.clientWidth - 2) / natural));
    if (Math.abs(wanted - current) > 0.005) {
      if (wanted === 1) {
        box.style.removeProperty("--math-fit");
      } else {
        box.style.setProperty("--math-fit", wanted.toFixed(3));
      }
    }
  }

  function update() {
    document.querySelectorAll("div.math").forEach(fit);
    // A formula's box scrolls only when the formula is wider (it clips otherwise, measured alike).
    document.querySelectorAll("div.math, span.math").forEach(function (box) {
      box.classList.toggle("math-scroll", box.scrollWidth > box.clientWidth + 1);
    });
    document.querySelectorAll(OWN).forEach(function (box) {
      if (wide(box)) {
        box.tabIndex = 0;
      } else {
        box.removeAttribute("tabindex");
      }
    });
    document.querySelectorAll(BOXES).forEach(function (box) {
      if (!box.dataset.scrollWatched) {
        box.dataset.scrollWatched = "1";
        box.addEventListener("scroll", function () { mark(box); }, { passive: true });
      }
      mark(box);
    });
  }

  // Long inline code (`attention_course.efficient.cached_self_attention`) may break after a dot,
  // an underscore, an opening parenthesis or a comma, as a reader splits a name, rather than in
  // the middle of a word: each such place gets a <wbr> (it adds no character to what is copied).
  var BREAK_AFTER = /([._(,\/])(?=[^\s])/g;
  function breakable(span) {
    var text = span.textContent;
    if (text.length < 16 || span.dataset.breakable || span.children.length) {
      return;
    }
    span.dataset.breakable = "1";
    var pieces = text.split(BREAK_AFTER);
    var out = document.createDocumentFragment();
    for (var i = 0; i < pieces.length; i += 2) {
      var piece = pieces[i] + (i + 1 < pieces.length ? pieces[i + 1] : "");
      out.appendChild(document.createTextNode(piece));
      if (i + 1 < pieces.length) {
        out.appendChild(document.createElement("wbr"));
      }
    }
    span.textContent = "";
    span.appendChild(out);
  }

  var timer = null;
  function later() {
    clearTimeout(timer);
    timer = setTimeout(update, 100);
  }

  function start() {
    document.querySelectorAll("code.literal span.pre").forEach(breakable);
    document.querySelectorAll("div.cell_output img").forEach(function (img) {
      if (img.complete) {
        markFigure(img);
      } else {
        img.addEventListener("load", function () { markFigure(img); later(); });
      }
    });
    update();
    window.addEventListener("resize", later);
    var main = document.getElementById("main-content") || document.body;
    // Solutions unfold, MathJax typesets: both change what overflows.
    new MutationObserver(later).observe(main, { subtree: true, childList: true, attributes: true,
                                                attributeFilter: ["class", "style", "open"] });
    if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
      MathJax.startup.promise.then(update);
    }
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
