// Line charts as inline SVG (no scripts, no fonts to fetch): axes with ticks and labels, a legend, an optional
// ± band, dashed lines where one stage ends and the next begins on the shared step axis.
//
//   pixel x = plot.left + (x − x0) / (x1 − x0) · plot.width
//   pixel y = plot.top + plot.height − (y − y0) / (y1 − y0) · plot.height      (rounded to 0.01 px)
//
// The <svg> carries data-x-domain="x0 x1", data-y-domain="y0 y1" and data-plot="left top width height", and each
// <polyline> data-key and data-stage, so a reader (or a test) can map the drawn points back to values.

export type Point = readonly [x: number, y: number];

export interface ChartSegment {
  /** The stage the points belong to; a series is drawn as one line per stage, never joined across stages. */
  stage: string;
  /** Where the stage starts on the x axis: tooltips show the stage's own step, x − offset. */
  offset?: number;
  points: readonly Point[];
  /** Optional band around the line: [x, low, high]. */
  band?: readonly (readonly [x: number, low: number, high: number])[];
}

export interface ChartSeries {
  /** The metric key (data-key of its lines). */
  key: string;
  label: string;
  color: string;
  segments: readonly ChartSegment[];
}

export interface LineChart {
  id: string;
  title: string;
  xLabel: string;
  yLabel: string;
  series: readonly ChartSeries[];
  /** Where each stage starts on the x axis (the first at the axis start); drawn when there are two or more. */
  stages?: readonly { x: number; label: string }[];
  /** The x range to show (default: the data's). */
  xDomain?: readonly [number, number];
  /** A fixed y range (e.g. [0, 1] for accuracy); default: the data's, widened to round ticks. */
  yDomain?: readonly [number, number];
  /** Shown in the plot area when there are no points. */
  emptyMessage?: string;
  width?: number;
  height?: number;
}

/** Tableau 10: distinct on screen and in print. */
export const PALETTE = [
  '#1f77b4',
  '#ff7f0e',
  '#2ca02c',
  '#d62728',
  '#9467bd',
  '#8c564b',
  '#e377c2',
  '#7f7f7f',
  '#bcbd22',
  '#17becf',
];

const FONT = 'font-family="system-ui, -apple-system, Segoe UI, Helvetica, Arial, sans-serif"';
/** Average glyph width of the 11 px legend/tick font, for laying out text without measuring it. */
const CHAR_WIDTH = 6.3;
/** Points per line up to which every point gets a marker (with its value as a tooltip). */
const MARKER_LIMIT = 80;

export function escapeXml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

const round2 = (v: number) => Math.round(v * 100) / 100;

/** [min, max] of the values (a loop: spreading 10⁵ values into Math.min overflows the stack); null when empty. */
export function extent(values: Iterable<number>): [number, number] | null {
  let lo = Number.POSITIVE_INFINITY;
  let hi = Number.NEGATIVE_INFINITY;
  for (const v of values) {
    if (v < lo) lo = v;
    if (v > hi) hi = v;
  }
  return lo <= hi ? [lo, hi] : null;
}

/** The tick spacing 1, 2 or 5 × 10^k that gives about `count` intervals over [min, max]. */
export function tickStep(min: number, max: number, count = 5): number {
  const raw = (max - min) / count;
  const magnitude = 10 ** Math.floor(Math.log10(raw));
  const normalized = raw / magnitude;
  return (normalized < 1.5 ? 1 : normalized < 3 ? 2 : normalized < 7 ? 5 : 10) * magnitude;
}

/** The most ticks an axis gets; more means the step is below what the numbers can resolve. */
const MAX_TICKS = 1000;

/**
 * Multiples of `step` within [min, max] (with a little slack for rounding). Counted from 0, not by stepping the
 * multiple itself: above 2^53 `i + 1 === i`, and a step far below the values' magnitude would never reach the end.
 */
export function ticks(min: number, max: number, step: number): number[] {
  const out: number[] = [];
  const first = Math.ceil(min / step - 1e-9);
  const last = Math.floor(max / step + 1e-9);
  const count = last - first + 1;
  if (!Number.isFinite(count) || count > MAX_TICKS) return [min, max];
  for (let k = 0; k < count; k++) out.push(Number(((first + k) * step).toPrecision(12)));
  return out;
}

/**
 * A spread narrower than this fraction of the values' magnitude is a constant with rounding noise (a metric that
 * differs in its last bits): drawn as one value, since ticks that fine cannot be labelled or even counted.
 */
const RELATIVE_RESOLUTION = 1e-9;

/** A range that holds [lo, hi] and ends on ticks; a single value (or one up to rounding) gets room around it. */
export function niceDomain(lo: number, hi: number): [number, number] {
  // the second test: a spread among subnormals (5e-324 ± 5e-324) whose tick step underflows to 0
  if (hi - lo <= Math.max(Math.abs(lo), Math.abs(hi)) * RELATIVE_RESOLUTION || !(tickStep(lo, hi) > 0)) {
    const mid = lo + (hi - lo) / 2;
    // 10% of the value, or 1 where that is 0 or vanishes (a subnormal such as 5e-324 has no 10%)
    const pad = Math.abs(mid) * 0.1 > Number.MIN_VALUE * 1e10 ? Math.abs(mid) * 0.1 : 1;
    lo = mid - pad;
    hi = mid + pad;
  }
  const step = tickStep(lo, hi);
  const clean = (v: number) => Number(v.toPrecision(12));
  return [clean(Math.floor(lo / step + 1e-9) * step), clean(Math.ceil(hi / step - 1e-9) * step)];
}

/**
 * Tick labels with as many digits as the spacing needs; exponents (same digits on every tick of the axis) when the
 * axis' largest magnitude `scale` is tiny or huge.
 */
export function formatTick(value: number, step: number, scale = Math.abs(value)): string {
  if (value === 0) return '0';
  if (scale < 1e-3 || scale >= 1e6) {
    const digits = Math.max(0, Math.floor(Math.log10(scale) + 1e-9) - Math.floor(Math.log10(step) + 1e-9));
    return value.toExponential(Math.min(digits, 6));
  }
  return value.toFixed(Math.max(0, -Math.floor(Math.log10(step) + 1e-9)));
}

/** The SVG of one chart. */
export function renderLineChart(chart: LineChart): string {
  const width = chart.width ?? 640;
  const height = chart.height ?? 320;
  const points = chart.series.flatMap((s) => s.segments.flatMap((g) => g.points));
  const bandValues = chart.series.flatMap((s) => s.segments.flatMap((g) => (g.band ?? []).flatMap(([, lo, hi]) => [lo, hi])));

  // legend rows: entries left to right, wrapped at the plot's width
  const left = 64;
  const right = 16;
  const plotWidth = width - left - right;
  const legendRows = layoutLegend(chart.series, plotWidth);
  const legendHeight = chart.series.length ? legendRows.length * 16 : 0;
  const stages = chart.stages ?? [];
  const stageStrip = stages.length > 1 ? 16 : 0;
  const top = 30 + legendHeight + 6 + stageStrip;
  const bottom = 44;
  const plot = { left, top, width: plotWidth, height: height - top - bottom };

  const xs = [...points.map(([x]) => x), ...(chart.stages ?? []).map((s) => s.x)];
  const [x0, x1] = chart.xDomain ?? extent(xs) ?? [0, 1];
  const xDomain: [number, number] = x0 === x1 ? [x0, x0 + 1] : [x0, x1];
  const ys = extent([...points.map(([, y]) => y), ...bandValues]);
  const yDomain: [number, number] = chart.yDomain ? [chart.yDomain[0], chart.yDomain[1]] : ys ? niceDomain(ys[0], ys[1]) : [0, 1];
  const px = (x: number) => round2(plot.left + ((x - xDomain[0]) / (xDomain[1] - xDomain[0])) * plot.width);
  const py = (y: number) => round2(plot.top + plot.height - ((y - yDomain[0]) / (yDomain[1] - yDomain[0])) * plot.height);

  const out: string[] = [];
  out.push(
    `<svg xmlns="http://www.w3.org/2000/svg" id="chart-${escapeXml(chart.id)}" class="chart" viewBox="0 0 ${width} ${height}" ` +
      `width="${width}" height="${height}" ${FONT} font-size="11" ` +
      `data-x-domain="${xDomain[0]} ${xDomain[1]}" data-y-domain="${yDomain[0]} ${yDomain[1]}" ` +
      `data-plot="${plot.left} ${plot.top} ${plot.width} ${plot.height}" role="img" aria-label="${escapeXml(chart.title)}">`,
  );
  out.push(`<title>${escapeXml(chart.title)}</title>`);
  out.push(`<rect x="0" y="0" width="${width}" height="${height}" fill="#fff"/>`);
  out.push(`<text x="${left}" y="18" font-size="14" font-weight="600" fill="#111">${escapeXml(chart.title)}</text>`);

  // legend
  legendRows.forEach((row, r) => {
    const y = 30 + r * 16 + 8;
    for (const entry of row) {
      const x = left + entry.x;
      out.push(
        `<line x1="${x}" y1="${y - 4}" x2="${x + 20}" y2="${y - 4}" stroke="${entry.color}" stroke-width="2.5"/>` +
          `<text x="${x + 26}" y="${y}" fill="#333">${escapeXml(entry.label)}</text>`,
      );
    }
  });

  // grid, ticks and axis labels
  out.push(...axesSvg(plot, xDomain, yDomain, px, py, chart.xLabel, chart.yLabel, height));

  // stage boundaries, the stage names in a strip above the plot
  if (stages.length > 1)
    for (const [i, stage] of stages.entries()) {
      const x = px(stage.x);
      if (i > 0)
        out.push(
          `<line class="stage-boundary" x1="${x}" y1="${plot.top}" x2="${x}" y2="${plot.top + plot.height}" stroke="#666" stroke-dasharray="5 4"/>`,
        );
      out.push(
        `<text class="stage-label" x="${x + 3}" y="${plot.top - 5}" fill="#666" font-style="italic">${escapeXml(stage.label)}</text>`,
      );
    }

  // bands, then lines, then markers (so lines are never hidden under a band)
  for (const s of chart.series)
    for (const segment of s.segments) {
      const band = segment.band ?? [];
      if (band.length < 2) continue;
      const upper = band.map(([x, , hi]) => `${px(x)},${py(hi)}`);
      const lower = [...band].reverse().map(([x, lo]) => `${px(x)},${py(lo)}`);
      out.push(
        `<polygon class="band" data-stage="${escapeXml(segment.stage)}" points="${[...upper, ...lower].join(' ')}" fill="${s.color}" fill-opacity="0.15" stroke="none"/>`,
      );
    }
  for (const s of chart.series)
    for (const segment of s.segments) {
      if (segment.points.length === 0) continue;
      out.push(
        `<polyline data-key="${escapeXml(s.key)}" data-stage="${escapeXml(segment.stage)}" points="${segment.points
          .map(([x, y]) => `${px(x)},${py(y)}`)
          .join(' ')}" fill="none" stroke="${s.color}" stroke-width="1.8" stroke-linejoin="round"/>`,
      );
      if (segment.points.length <= MARKER_LIMIT)
        for (const [x, y] of segment.points)
          out.push(
            `<circle cx="${px(x)}" cy="${py(y)}" r="2.6" fill="${s.color}"><title>${escapeXml(`${s.label} · ${segment.stage} step ${x - (segment.offset ?? 0)}: ${y}`)}</title></circle>`,
          );
    }

  if (points.length === 0)
    out.push(
      `<text x="${plot.left + plot.width / 2}" y="${plot.top + plot.height / 2}" text-anchor="middle" fill="#999" font-size="13">${escapeXml(
        chart.emptyMessage ?? 'no data',
      )}</text>`,
    );
  out.push('</svg>');
  return out.join('\n');
}

/** The legend's rows: entries left to right (x from the plot's left edge), wrapped at the plot's width. */
function layoutLegend(series: readonly ChartSeries[], plotWidth: number): { label: string; color: string; x: number }[][] {
  const legendRows: { label: string; color: string; x: number }[][] = [[]];
  let cursor = 0;
  for (const s of series) {
    const entryWidth = 26 + s.label.length * CHAR_WIDTH + 14;
    if (cursor > 0 && cursor + entryWidth > plotWidth) {
      legendRows.push([]);
      cursor = 0;
    }
    legendRows.at(-1)?.push({ label: s.label, color: s.color, x: cursor });
    cursor += entryWidth;
  }
  return legendRows;
}

interface PlotArea {
  left: number;
  top: number;
  width: number;
  height: number;
}

/** The grid and the ticks with their labels on both axes, the plot's frame, and the axis labels (SVG elements). */
function axesSvg(
  plot: PlotArea,
  xDomain: readonly [number, number],
  yDomain: readonly [number, number],
  px: (x: number) => number,
  py: (y: number) => number,
  xLabel: string,
  yLabel: string,
  height: number,
): string[] {
  const svg: string[] = [];
  const yStep = tickStep(yDomain[0], yDomain[1]);
  const yTicks = ticks(yDomain[0], yDomain[1], yStep);
  const yScale = Math.max(Math.abs(yDomain[0]), Math.abs(yDomain[1]));
  for (const t of yTicks) {
    const y = py(t);
    svg.push(
      `<line x1="${plot.left}" y1="${y}" x2="${plot.left + plot.width}" y2="${y}" stroke="#e5e5e5"/>` +
        `<line x1="${plot.left - 4}" y1="${y}" x2="${plot.left}" y2="${y}" stroke="#555"/>` +
        `<text x="${plot.left - 7}" y="${y + 4}" text-anchor="end" fill="#444">${formatTick(t, yStep, yScale)}</text>`,
    );
  }
  const xStep = Math.max(1, tickStep(xDomain[0], xDomain[1], 8));
  const xTicks = ticks(xDomain[0], xDomain[1], xStep);
  const xScale = Math.max(Math.abs(xDomain[0]), Math.abs(xDomain[1]));
  for (const t of xTicks) {
    const x = px(t);
    const y = plot.top + plot.height;
    svg.push(
      `<line x1="${x}" y1="${plot.top}" x2="${x}" y2="${y}" stroke="#f0f0f0"/>` +
        `<line x1="${x}" y1="${y}" x2="${x}" y2="${y + 4}" stroke="#555"/>` +
        `<text x="${x}" y="${y + 16}" text-anchor="middle" fill="#444">${formatTick(t, xStep, xScale)}</text>`,
    );
  }
  svg.push(
    `<rect x="${plot.left}" y="${plot.top}" width="${plot.width}" height="${plot.height}" fill="none" stroke="#888"/>`,
    `<text x="${plot.left + plot.width / 2}" y="${height - 8}" text-anchor="middle" fill="#222">${escapeXml(xLabel)}</text>`,
    `<text transform="translate(16 ${plot.top + plot.height / 2}) rotate(-90)" text-anchor="middle" fill="#222">${escapeXml(yLabel)}</text>`,
  );
  return svg;
}
