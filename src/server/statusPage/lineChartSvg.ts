/**
 * A small line chart as SVG markup: one polyline per series over shared times, a zero-based y axis
 * with its top value, the time span on the x axis, and a legend. Gaps (null values) break a line.
 *
 * Runs in the browser too (statusPageHtml.ts ships its source): self-contained, no imports used at
 * run time.
 */
import type { StatusChart } from "./statusCharts.ts";

export interface ChartSize {
  width: number;
  height: number;
}

export const CHART_COLORS = ["#2f7ed8", "#e4572e", "#17a398", "#a05195", "#f2a541", "#5c6b73"];

export function lineChartSvg(chart: StatusChart, times: readonly number[], size: ChartSize, colors: readonly string[]): string {
  const escape = (text: string) => text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
  const short = (value: number) => {
    const abs = Math.abs(value);
    if (abs >= 1e9) return `${+(value / 1e9).toFixed(1)}G`;
    if (abs >= 1e6) return `${+(value / 1e6).toFixed(1)}M`;
    if (abs >= 1e3) return `${+(value / 1e3).toFixed(1)}k`;
    return `${+value.toFixed(abs < 10 ? 2 : 0)}`;
  };
  const left = 48;
  const right = 8;
  const top = 24;
  const bottom = 36;
  const plotWidth = size.width - left - right;
  const plotHeight = size.height - top - bottom;
  let max = 0;
  for (const series of chart.series) for (const value of series.values) if (value !== null && value > max) max = value;
  const yTop = max > 0 ? max : 1;
  const x = (i: number) => (times.length <= 1 ? left + plotWidth : left + (i / (times.length - 1)) * plotWidth);
  const y = (value: number) => top + plotHeight - (value / yTop) * plotHeight;

  const parts: string[] = [];
  parts.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${size.width}" height="${size.height}" viewBox="0 0 ${size.width} ${size.height}" role="img" aria-label="${escape(chart.title)}">`);
  parts.push(`<text x="${left}" y="14" class="chart-title">${escape(chart.title)}</text>`);
  parts.push(`<line x1="${left}" y1="${top + plotHeight}" x2="${left + plotWidth}" y2="${top + plotHeight}" class="axis"/>`);
  parts.push(`<line x1="${left}" y1="${top}" x2="${left}" y2="${top + plotHeight}" class="axis"/>`);
  parts.push(`<line x1="${left}" y1="${top}" x2="${left + plotWidth}" y2="${top}" class="grid"/>`);
  parts.push(`<text x="${left - 4}" y="${top + 4}" text-anchor="end" class="tick">${escape(short(yTop))}</text>`);
  parts.push(`<text x="${left - 4}" y="${top + plotHeight}" text-anchor="end" class="tick">0</text>`);
  parts.push(`<text x="4" y="${top + plotHeight / 2}" class="tick" transform="rotate(-90 10 ${top + plotHeight / 2})">${escape(chart.unit)}</text>`);
  if (times.length > 1) {
    const span = Math.round((times[times.length - 1]! - times[0]!) / 1000);
    parts.push(`<text x="${left}" y="${top + plotHeight + 14}" class="tick">-${span} s</text>`);
    parts.push(`<text x="${left + plotWidth}" y="${top + plotHeight + 14}" text-anchor="end" class="tick">now</text>`);
  }
  let empty = true;
  chart.series.forEach((series, index) => {
    const color = colors[index % colors.length]!;
    let run: string[] = [];
    const flush = () => {
      if (run.length === 1) parts.push(`<circle cx="${run[0]!.split(",")[0]}" cy="${run[0]!.split(",")[1]}" r="2.5" fill="${color}"/>`);
      else if (run.length > 1) parts.push(`<polyline fill="none" stroke="${color}" stroke-width="2" points="${run.join(" ")}"/>`);
      run = [];
    };
    series.values.forEach((value, i) => {
      if (value === null) return flush();
      empty = false;
      run.push(`${x(i).toFixed(1)},${y(value).toFixed(1)}`);
    });
    flush();
    // The legend: up to three entries on the bottom line.
    if (index < 3) {
      const legendX = left + index * Math.floor(plotWidth / 3);
      parts.push(`<rect x="${legendX}" y="${size.height - 10}" width="10" height="3" fill="${color}"/>`);
      parts.push(`<text x="${legendX + 14}" y="${size.height - 5}" class="legend">${escape(series.name.length > 40 ? `${series.name.slice(0, 39)}…` : series.name)}</text>`);
    }
  });
  if (empty) parts.push(`<text x="${left + plotWidth / 2}" y="${top + plotHeight / 2}" text-anchor="middle" class="empty">${chart.series.length === 0 ? "not in this mode" : "no data yet"}</text>`);
  parts.push(`</svg>`);
  return parts.join("");
}
