// Continued pre-training data (algorithm cpt: Trinity-RFT's CPTFormatter, schema cpt): plain text, no chat template,
// and the whole sequence is the loss.
//   row     {prompt: "any text"}  (the text column is format.prompt_key, Trinity's "prompt" by default: set
//           prompt_key: text for the usual {text} rows of pre-training corpora)
//   tokens  = [bos]? ++ encode(text) ++ [eos]?     (the tokenizer's own BOS, when it has one; EOS ends the document)
//   prompt  = the first token: nothing precedes it, so it cannot be predicted
//   loss    = the SFT loss over every later token, action mask all 1:  −(1/(n−1)) Σ_{t=1}^{n−1} log π(x_t | x_<t)
//             (token-mean; with a BOS every token of the text is predicted, without one every token but the first)
// A row whose text is empty, not text, or one token long (nothing to predict) is an error naming it.
import type { Tokenizer } from '../../tokenizer/index.js';
import type { Experience } from '../experience.js';
import { type DatasetFormat, DatasetError, datasetRows, refuseImages } from './dataset.js';

/** Reads a continued pre-training dataset (rows of plain text: see the header) into experiences. */
export async function loadCptDataset(file: string, tokenizer: Tokenizer, format: DatasetFormat = {}): Promise<Experience[]> {
  refuseImages(file, format, 'CPT');
  const textKey = format.promptKey ?? 'prompt';
  const bos = tokenizer.bosTokenId;
  const eos = tokenizer.eosTokenIds[0];
  const out: Experience[] = [];
  for await (const { where, row: rowName, value } of datasetRows(file, format)) {
    if (value === null || typeof value !== 'object' || Array.isArray(value))
      throw new DatasetError(where, 'a row must be a JSON object');
    const row = value as Record<string, unknown>;
    const text = row[textKey];
    if (typeof text !== 'string' || text === '') {
      const got = text === undefined ? 'it is missing' : `got ${text === '' ? 'an empty string' : typeof text}`;
      throw new DatasetError(where, `'${textKey}' (the text to train on, format.prompt_key) must be non-empty text; ${got}`);
    }
    const tokens = [...(bos === null ? [] : [bos]), ...tokenizer.encode(text), ...(eos === undefined ? [] : [eos])];
    if (tokens.length < 2) throw new DatasetError(where, `'${textKey}' is one token long: nothing follows it to predict`);
    out.push({
      eid: where,
      tokens,
      promptLength: 1,
      actionMask: tokens.slice(1).map(() => 1),
      info: { taskId: typeof row.id === 'string' ? row.id : `cpt:${rowName}` },
      responseText: text,
    });
  }
  if (out.length === 0) throw new DatasetError(file, 'the dataset has no rows');
  return out;
}
