// "More rows" without a round trip: copy the last row of the table body the button names,
// empty it and number its fields on. Without JavaScript the button submits the form and
// the server sends it back with more rows, so nothing here is needed for the page to work.
document.addEventListener("click", (event) => {
  const button = event.target.closest("button[data-add-row]");
  const body = button && document.getElementById(button.dataset.addRow);
  const last = body && body.rows[body.rows.length - 1];
  if (!last) return;
  event.preventDefault();
  const row = last.cloneNode(true);
  const index = body.rows.length;
  row.className = "";
  row.querySelectorAll(".field-errors, .hint").forEach((el) => el.remove());
  row.querySelectorAll("[name]").forEach((field) => {
    field.name = field.name.replace(/-\d+-/, `-${index}-`);
    if (field.type === "checkbox") field.checked = false;
    else field.value = "";
  });
  body.appendChild(row);
  row.querySelector("input, textarea").focus();
});
