// The tool agent's lookup tool: a small local document set, searched by key or by keywords.
//
//   lookup("Varnia")            → the document keyed Varnia (case-insensitive): "Varnia: population 4821"
//   lookup("population varnia") → no key matches: the documents sharing the most words with the query (at most
//                                 maxResults, in document order, one per line), or "no match"
//
// Documents are JSON: [{ "key": "Varnia", "text": "Varnia: population 4821" }, ...]. The built-in set
// (tool-agent-documents.json, 120 fictional places with populations) is what examples/tool_agent trains on.
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';

export interface LookupDocument {
  key: string;
  text: string;
}

const DocumentsSchema = z.array(z.object({ key: z.string().min(1), text: z.string() }).strict()).min(1);

export const NO_MATCH = 'no match';

const words = (text: string): string[] => text.toLowerCase().match(/[a-z0-9]+/g) ?? [];

export class DocumentStore {
  readonly documents: readonly LookupDocument[];
  readonly #byKey = new Map<string, LookupDocument>();
  readonly #words: ReadonlyArray<ReadonlySet<string>>;

  constructor(documents: readonly LookupDocument[]) {
    this.documents = documents;
    for (const document of documents) {
      const key = document.key.trim().toLowerCase();
      if (this.#byKey.has(key)) throw new Error(`lookup documents: duplicate key '${document.key}'`);
      this.#byKey.set(key, document);
    }
    this.#words = documents.map((d) => new Set(words(`${d.key} ${d.text}`)));
  }

  /** Reads a JSON document file (see the header); errors name the file and the bad entry. */
  static load(file: string): DocumentStore {
    let value: unknown;
    try {
      value = JSON.parse(readFileSync(file, 'utf8'));
    } catch (error) {
      throw new Error(`lookup documents ${file}: ${(error as Error).message}`, { cause: error });
    }
    const parsed = DocumentsSchema.safeParse(value);
    if (!parsed.success) {
      const issue = parsed.error.issues[0];
      throw new Error(`lookup documents ${file}: expected [{key, text}, ...]: ${issue?.path.join('.')} ${issue?.message}`);
    }
    return new DocumentStore(parsed.data);
  }

  /** The document keyed `key` (case-insensitive), if any. */
  get(key: string): LookupDocument | undefined {
    return this.#byKey.get(key.trim().toLowerCase());
  }

  /** The tool's answer to a query (see the header). */
  lookup(query: string, maxResults = 2): string {
    const exact = this.get(query);
    if (exact !== undefined) return exact.text;
    const wanted = [...new Set(words(query))];
    if (wanted.length === 0) return NO_MATCH;
    const scored = this.documents
      .map((document, index) => ({ document, score: wanted.filter((w) => this.#words[index]?.has(w)).length }))
      .filter((s) => s.score > 0);
    const best = Math.max(0, ...scored.map((s) => s.score));
    const top = scored.filter((s) => s.score === best);
    return top.length === 0
      ? NO_MATCH
      : top
          .slice(0, maxResults)
          .map((s) => s.document.text)
          .join('\n');
  }
}

let builtIn: DocumentStore | null = null;

/** The built-in document set (tool-agent-documents.json next to this file). */
export function builtInDocuments(): DocumentStore {
  builtIn ??= DocumentStore.load(fileURLToPath(new URL('./tool-agent-documents.json', import.meta.url)));
  return builtIn;
}
