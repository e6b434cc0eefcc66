// Shared helpers of scalerl serve's pages: fetch JSON, format numbers, draw with Plotly.
"use strict";
async function getJSON(url) {
  const r = await fetch(url, {cache: "no-store"});
  if (!r.ok) throw new Error(url + ": " + r.status);
  return r.json();
}
function fmt(x, d = 3) { return (x === null || x === undefined) ? "–" : Number(x).toFixed(d); }
function interval(o, d = 3) {
  if (!o || o.median === null || o.median === undefined) return "–";
  return fmt(o.median, d) + " [" + fmt(o.lo, d) + ", " + (o.hi === null ? "never" : fmt(o.hi, d)) + "]";
}
function esc(s) { return String(s).replace(/[&<>"]/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c])); }
function idFromPath(prefix) { return decodeURIComponent(location.pathname.slice(prefix.length)); }
