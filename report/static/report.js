// Sortable and filterable tables. The report reads fully without this script; it only
// adds ordering by a column (click its header) and a row filter above long tables.
"use strict";

function cellValue(row, index, numeric) {
  const cell = row.cells[index];
  const raw = cell.dataset.sort !== undefined ? cell.dataset.sort : cell.textContent.trim();
  if (!numeric) return raw.toLowerCase();
  const value = parseFloat(raw);
  return Number.isNaN(value) ? null : value;
}

function sortBy(table, header) {
  const index = header.cellIndex;
  const numeric = header.dataset.type === "num";
  const ascending = header.getAttribute("aria-sort") !== "ascending";
  for (const th of table.tHead.rows[0].cells) th.removeAttribute("aria-sort");
  header.setAttribute("aria-sort", ascending ? "ascending" : "descending");
  const body = table.tBodies[0];
  const rows = Array.from(body.rows);
  rows.sort((a, b) => {
    const x = cellValue(a, index, numeric);
    const y = cellValue(b, index, numeric);
    if (x === y) return 0;
    if (x === null) return 1; // unknown values last, whichever the direction
    if (y === null) return -1;
    return (x < y ? -1 : 1) * (ascending ? 1 : -1);
  });
  for (const row of rows) body.appendChild(row);
}

function showCount(table) {
  const counter = document.querySelector(`[data-count-for="${table.id}"]`);
  if (!counter) return;
  const rows = Array.from(table.tBodies[0].rows);
  const shown = rows.filter((row) => !row.hidden).length;
  counter.textContent = `${shown} of ${rows.length} rows`;
}

function filterRows(input) {
  const table = document.getElementById(input.dataset.table);
  const words = input.value.toLowerCase().split(/\s+/).filter(Boolean);
  for (const row of table.tBodies[0].rows) {
    const text = row.textContent.toLowerCase();
    row.hidden = !words.every((word) => text.includes(word));
  }
  showCount(table);
}

for (const table of document.querySelectorAll("table.sortable")) {
  for (const header of table.tHead.rows[0].cells) {
    header.addEventListener("click", () => sortBy(table, header));
  }
  showCount(table);
}
for (const input of document.querySelectorAll(".filter input")) {
  input.addEventListener("input", () => filterRows(input));
}
