// PREFIX.json -> PREFIX.html (`bench --output` at the end of a sweep, and `bench report`).
import { writeFileAtomic } from '../bench/output.js';
import { renderHtml } from './html.js';
import { readReport } from './report-file.js';

/** The HTML file next to a report: PREFIX.json -> PREFIX.html (any other name: NAME.html). */
export function htmlPathFor(jsonFile: string): string {
  return jsonFile.endsWith('.json') ? `${jsonFile.slice(0, -'.json'.length)}.html` : `${jsonFile}.html`;
}

/** Renders the saved report into `htmlFile` (atomically: a reader never sees half a page). */
export async function writeHtmlReport(jsonFile: string, htmlFile: string = htmlPathFor(jsonFile)): Promise<string> {
  const html = await renderHtml(readReport(jsonFile));
  writeFileAtomic(htmlFile, html);
  return htmlFile;
}
