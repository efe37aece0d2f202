// Format checks on a response's text (Trinity-RFT's FormatReward and validate_think_pattern).

/** Trinity-RFT's default: reasoning in <think>…</think>, then the answer in <answer>…</answer>, nothing after. */
export const THINK_ANSWER_PATTERN = String.raw`.*?<think>.*?</think>\s*<answer>.*?</answer>\s*$`;

/**
 * True when `pattern` matches at the start of `text`, with `.` matching newlines and `$` any line end — Python's
 * `re.match(pattern, text, re.DOTALL | re.MULTILINE)`, so Trinity-RFT patterns carry over unchanged.
 */
export function matchesFormat(text: string, pattern: string = THINK_ANSWER_PATTERN): boolean {
  let regex: RegExp;
  try {
    regex = new RegExp(pattern, 'smy'); // y: anchored at lastIndex 0, like re.match
  } catch (error) {
    throw new Error(`format pattern ${JSON.stringify(pattern)} is not a valid regular expression: ${(error as Error).message}`);
  }
  return regex.test(text);
}

/** Exactly one <think> and one </think>, in that order (a reply prefix "<think>" counts when included in `text`). */
export function hasThinkBlock(text: string): boolean {
  const opens = text.split('<think>').length - 1;
  const closes = text.split('</think>').length - 1;
  return opens === 1 && closes === 1 && text.indexOf('<think>') < text.indexOf('</think>');
}
