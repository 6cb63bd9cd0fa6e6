// What a request may buy beyond its tokens, and its removal while a budget degrades
// (docs/rewrites.md): OpenRouter's web plugin and `web_search_options` (billed per search), the
// file-parser plugin's OCR engine (billed per page; the free `pdf-text` engine takes its place),
// and the server tools the router or provider runs and bills per use: Anthropic's web search, web
// fetch and code execution, OpenRouter's `openrouter:*` tools, the Responses API's hosted web
// search. A `tool_choice` naming a removed tool goes with it, and so does a `tools` list left empty,
// so the request stays one the router accepts.

/** Server-tool types billed per use: `web_search_20250305`, `code_execution_20250825`, `web_search_preview`, `openrouter:web_search`… */
const PAID_TOOL = /^(?:web_search|web_fetch|code_execution)(?:_|$)|^openrouter:/;
/** The file-parser engine that costs nothing (OpenRouter's default for a PDF may be a paid OCR). */
const FREE_PDF_ENGINE = 'pdf-text';

type Json = Record<string, any>;

function isPaidTool(tool: unknown): boolean {
  const type = (tool as Json | null)?.type;
  return typeof type === 'string' && PAID_TOOL.test(type);
}

/**
 * Removes the paid extras from a body, in place; returns what it did, one line each (empty when
 * the body had none). `why` names the stage for those lines.
 */
export function dropPaidExtras(body: Json, why: string): string[] {
  const done: string[] = [];
  if ('web_search_options' in body) {
    delete body.web_search_options;
    done.push(`web_search_options removed (${why})`);
  }
  if (Array.isArray(body.plugins)) {
    const kept: unknown[] = [];
    for (const p of body.plugins as Array<Json | null>) {
      if (p?.id === 'web') {
        done.push(`plugins[id=web] removed (${why})`);
        continue;
      }
      if (p?.id === 'file-parser' && p.pdf?.engine !== FREE_PDF_ENGINE) {
        kept.push({ ...p, pdf: { ...(p.pdf ?? {}), engine: FREE_PDF_ENGINE } });
        done.push(`plugins[id=file-parser].pdf.engine set to ${FREE_PDF_ENGINE} (${why})`);
        continue;
      }
      kept.push(p);
    }
    if (done.length > 0) body.plugins = kept;
  }
  if (Array.isArray(body.tools) && body.tools.some(isPaidTool)) {
    const removed = new Set<string>();
    body.tools = body.tools.filter((t: Json | null) => {
      if (!isPaidTool(t)) return true;
      removed.add(t!.type);
      if (typeof t!.name === 'string') removed.add(t!.name);
      return false;
    });
    done.push(`tools[type=${[...removed].join(',')}] removed (${why})`);
    const choice = body.tool_choice as Json | null | undefined;
    const named = choice && typeof choice === 'object' && (removed.has(choice.name) || removed.has(choice.function?.name) || isPaidTool(choice));
    if (body.tools.length === 0 || named) {
      if ('tool_choice' in body) done.push(`tool_choice removed (${why})`);
      delete body.tool_choice;
    }
    if (body.tools.length === 0) delete body.tools;
  }
  return done;
}
