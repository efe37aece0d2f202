// Tool calls in generated text, Hermes style (Qwen2.5 / Qwen3 chat templates, vLLM's `hermes` parser):
//
//   Let me look that up.
//   <tool_call>
//   {"name": "search", "arguments": {"query": "rope scaling"}}
//   </tool_call>
//
// → content 'Let me look that up.' (trailing whitespace before the calls dropped), tool_calls [{ id, type: 'function', function: { name: 'search', arguments:
// '{"query":"rope scaling"}' } }]. A block whose JSON does not parse, or has no string "name", stays in the content
// (the model did not make a valid call; the reward can see it).
import { randomBytes } from 'node:crypto';
import type { ToolCall } from '../tokenizer/index.js';

export const TOOL_CALL_OPEN = '<tool_call>';
export const TOOL_CALL_CLOSE = '</tool_call>';

export interface ParsedToolCalls {
  content: string;
  toolCalls: Array<ToolCall & { id: string; type: 'function'; function: { name: string; arguments: string } }>;
}

export function parseToolCalls(text: string): ParsedToolCalls {
  const toolCalls: ParsedToolCalls['toolCalls'] = [];
  let content = '';
  let from = 0;
  for (;;) {
    const open = text.indexOf(TOOL_CALL_OPEN, from);
    if (open < 0) break;
    const close = text.indexOf(TOOL_CALL_CLOSE, open + TOOL_CALL_OPEN.length);
    const end = close < 0 ? text.length : close + TOOL_CALL_CLOSE.length;
    const call = parseCall(text.slice(open + TOOL_CALL_OPEN.length, close < 0 ? text.length : close));
    if (call === null) {
      content += text.slice(from, end);
    } else {
      content += text.slice(from, open);
      toolCalls.push({ id: `call_${randomBytes(12).toString('hex')}`, type: 'function', function: call });
    }
    from = end;
  }
  content += text.slice(from);
  return { content: toolCalls.length > 0 ? content.trimEnd() : content, toolCalls };
}

function parseCall(body: string): { name: string; arguments: string } | null {
  let value: unknown;
  try {
    value = JSON.parse(body.trim());
  } catch {
    return null;
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return null;
  const { name, arguments: args, parameters } = value as Record<string, unknown>;
  if (typeof name !== 'string' || name.length === 0) return null;
  const argValue = args ?? parameters ?? {};
  return { name, arguments: typeof argValue === 'string' ? argValue : JSON.stringify(argValue) };
}
