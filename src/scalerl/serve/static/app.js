// Shared helpers of scalerl serve's pages: fetch JSON, format numbers, draw with Plotly offline,
// smooth as TensorBoard does, and download what a chart shows.
"use strict";
async function getJSON(url) {
  const r = await fetch(url, {cache: "no-store"});
  if (!r.ok) throw new Error(url + ": " + r.status);
  return r.json();
}
function fmt(x, d = 3) { return (x === null || x === undefined) ? "–" : Number(x).toFixed(d); }
function interval(o, d = 3) {
  // as scalerl plan prints it: a median no draw reaches within the horizon is "never", its interval kept
  if (!o || o.lo === null || o.lo === undefined) return !o || o.median === null || o.median === undefined ? "–" : fmt(o.median, d);
  const mid = o.median === null || o.median === undefined ? "never" : fmt(o.median, d);
  return mid + " [" + fmt(o.lo, d) + ", " + (o.hi === null || o.hi === undefined ? "never" : fmt(o.hi, d)) + "]";
}
function esc(s) { return String(s).replace(/[&<>"]/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c])); }
function idFromPath(prefix) { return decodeURIComponent(location.pathname.slice(prefix.length)); }

// Plotly's offline configuration: no logo link, no "edit in Chart Studio", no send-to-cloud.
const PLOT_CONFIG = {displaylogo: false, showLink: false, showSendToCloud: false, showEditInChartStudio: false,
                     modeBarButtonsToRemove: ["sendDataToCloud", "lasso2d", "select2d"], responsive: true};

// TensorBoard's smoothing: a causal EMA, debiased for its zero start (no look-ahead):
//   last = w * last + (1 - w) * y_i ;  smoothed_i = last / (1 - w^(i+1))
function ema(ys, w) {
  let last = 0, n = 0;
  return ys.map(y => {
    if (y === null || y === undefined || !isFinite(y)) return null;
    if (w <= 0) return y;
    last = last * w + (1 - w) * y; n += 1;
    return last / (1 - Math.pow(w, n));
  });
}

// A chart's drawn data as CSV rows: trace, x, y (each trace the page drew, the band's edges included).
function crossingSpan(cross, end) {
  // where a crossing's interval lies on a chart that ends at ``end``: [lo, min(hi, end)], or null
  // where it starts at or past the end (it is then said, never shaded backwards over [end, lo])
  if (!cross || cross.lo === null || cross.lo === undefined) return null;
  const x1 = Math.min(cross.hi ?? end, end);
  return x1 > cross.lo ? [cross.lo, x1] : null;
}
function csvCell(text) {
  // a cell a spreadsheet would run as a formula (=, +, -, @, tab, CR first) is quoted as text (OWASP)
  const s = String(text);
  return '"' + (/^[=+\-@\t\r]/.test(s) ? "'" + s : s).replace(/"/g, '""') + '"';
}
function chartCSV(div) {
  const rows = ["trace,x,y"];
  for (const t of (div.data || [])) {
    const name = csvCell(t.name || "");
    (t.x || []).forEach((x, i) => { if (t.y && t.y[i] !== null && t.y[i] !== undefined) rows.push(`${name},${x},${t.y[i]}`); });
  }
  return rows.join("\n") + "\n";
}
function download(filename, text, type = "text/csv") {
  const a = document.createElement("a");
  a.href = URL.createObjectURL(new Blob([text], {type}));
  a.download = filename;
  document.body.appendChild(a); a.click(); a.remove();
}
// Numbers inside names compared as numbers: lr=5e-05 before lr=0.0003, seed9 before seed10.
function numericOrder(a, b) {
  const re = /[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?/g;
  const pa = a.split(re), pb = b.split(re), na = a.match(re) || [], nb = b.match(re) || [];
  for (let i = 0; i < Math.max(pa.length, pb.length); i++) {
    if ((pa[i] || "") !== (pb[i] || "")) return (pa[i] || "") < (pb[i] || "") ? -1 : 1;
    if (i < na.length && i < nb.length && Number(na[i]) !== Number(nb[i])) return Number(na[i]) - Number(nb[i]);
  }
  return a < b ? -1 : a > b ? 1 : 0;
}
const COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];
function rgba(hex, a) {
  const n = parseInt(hex.slice(1), 16);
  return `rgba(${(n >> 16) & 255},${(n >> 8) & 255},${n & 255},${a})`;
}
