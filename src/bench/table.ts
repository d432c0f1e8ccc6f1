// Plain-text tables for stderr: two-space indent, columns padded to their widest cell.

/** Lines of a table: the first `leftCols` columns left-aligned, the rest right-aligned (numbers). */
export function textTable(head: readonly string[], rows: ReadonlyArray<readonly string[]>, leftCols: number): string[] {
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const fmt = (cells: readonly string[]) =>
    '  ' + cells.map((c, i) => (i < leftCols ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ').trimEnd();
  return [fmt(head), ...rows.map(fmt)];
}
