// Tables wider than the screen scroll inside their own box (.scroll); the box's edges
// shade where there is more (style.css), and here a line under it says so in words.
// Boxes come and go (live sections, the preview panel): they are checked again after
// every change to the page and every resize.
"use strict";
(() => {
  function mark() {
    document.querySelectorAll(".scroll").forEach((box) => {
      const over = box.scrollWidth > box.clientWidth + 1;
      let hint = box.nextElementSibling;
      if (!hint || !hint.classList.contains("scroll-hint")) {
        if (!over) return;
        hint = document.createElement("p");
        hint.className = "scroll-hint";
        hint.setAttribute("aria-hidden", "true");  // the box itself is a named region
        hint.textContent = "← Scroll sideways for more →";
        box.after(hint);
      }
      hint.classList.toggle("shown", over);
      box.classList.toggle("overflows", over);
    });
  }

  let queued = false;
  function later() {
    if (queued) return;
    queued = true;
    requestAnimationFrame(() => {
      queued = false;
      mark();
    });
  }

  mark();
  window.addEventListener("resize", later);
  new MutationObserver(later).observe(document.body, { childList: true, subtree: true });
})();
