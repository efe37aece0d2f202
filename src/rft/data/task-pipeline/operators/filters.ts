// Row filters and the field mapper.
//
//   text_length_filter   keeps rows whose text has min_len ≤ length ≤ max_len characters (Unicode code points), as
//                        Data-Juicer's operator of that name
//   field_format_filter  keeps rows that have every required field (non-empty unless allow_empty) and whose fields
//                        match their regular expression (`patterns: {field: regex}`, searched as JavaScript RegExp)
//   field_mapper         renames and copies fields (dotted paths reach nested objects): `rename: {from: to}`,
//                        `copy: {from: to}`; a row without a source field is an error, kept, or dropped (on_missing)
import { TASK_OPERATORS } from '../registry.js';
import { deleteField, getField, requireText, setField } from '../rows.js';
import type { TaskOperatorModule, TaskRow } from '../types.js';

export interface LengthFilterOptions {
  textKey: string;
  minLen: number;
  maxLen: number;
}

export const textLengthFilter: TaskOperatorModule<LengthFilterOptions> = {
  description: 'keeps rows whose text length (characters) is in [min_len, max_len]',
  defaults: { textKey: '', minLen: 10, maxLen: Number.MAX_SAFE_INTEGER },
  run(rows, o, context) {
    if (!(o.minLen >= 0) || !(o.maxLen >= o.minLen))
      throw new Error(`${context.name}: need 0 <= min_len <= max_len, got min_len ${o.minLen}, max_len ${o.maxLen}`);
    const key = o.textKey || context.textKey;
    return rows.filter((row, i) => {
      const length = [...requireText(row, key, context.name, i)].length;
      if (length < o.minLen) context.count('too_short');
      else if (length > o.maxLen) context.count('too_long');
      else return true;
      return false;
    });
  },
};

export interface FormatFilterOptions {
  requiredFields: string[];
  /** field → regular expression its text must contain a match of (anchor it with ^…$ for a whole match). */
  patterns: Record<string, string>;
  /** Accept '' , [] and {} in required fields. */
  allowEmpty: boolean;
}

const isEmpty = (v: unknown): boolean =>
  v === '' || (Array.isArray(v) && v.length === 0) || (v !== null && typeof v === 'object' && Object.keys(v).length === 0);

export const fieldFormatFilter: TaskOperatorModule<FormatFilterOptions> = {
  description: 'keeps rows that have the required fields and whose fields match their patterns',
  defaults: { requiredFields: [], patterns: {}, allowEmpty: false },
  run(rows, o, context) {
    if (!Array.isArray(o.requiredFields) || o.requiredFields.some((f) => typeof f !== 'string'))
      throw new Error(`${context.name}: required_fields must be a list of field names`);
    if (Array.isArray(o.patterns)) throw new Error(`${context.name}: patterns must be a mapping {field: regex}`);
    const patterns = Object.entries(o.patterns).map(([field, source]): [string, RegExp] => {
      if (typeof source !== 'string') throw new Error(`${context.name}: patterns.${field} must be a regular expression string`);
      try {
        return [field, new RegExp(source, 'u')];
      } catch (error) {
        throw new Error(`${context.name}: patterns.${field}: ${(error as Error).message}`);
      }
    });
    return rows.filter((row) => {
      for (const field of o.requiredFields) {
        const value = getField(row, field);
        if (value === undefined || value === null || (!o.allowEmpty && isEmpty(value))) {
          context.count('missing_field');
          return false;
        }
      }
      for (const [field, pattern] of patterns) {
        const value = getField(row, field);
        const text = typeof value === 'string' ? value : typeof value === 'number' ? String(value) : null;
        if (text === null || !pattern.test(text)) {
          context.count('pattern_mismatch');
          return false;
        }
      }
      return true;
    });
  },
};

export interface FieldMapperOptions {
  rename: Record<string, string>;
  copy: Record<string, string>;
  /** A row without a source field: 'error' (the pipeline fails naming the row), 'keep' it unmapped, or 'drop' it. */
  onMissing: string;
}

export const fieldMapper: TaskOperatorModule<FieldMapperOptions> = {
  description: 'renames and copies fields (dotted paths for nested ones)',
  defaults: { rename: {}, copy: {}, onMissing: 'error' },
  run(rows, o, context) {
    if (!['error', 'keep', 'drop'].includes(o.onMissing))
      throw new Error(`${context.name}: on_missing must be 'error', 'keep' or 'drop', got '${o.onMissing}'`);
    for (const [kind, map] of [
      ['rename', o.rename],
      ['copy', o.copy],
    ] as const) {
      if (Array.isArray(map)) throw new Error(`${context.name}: ${kind} must be a mapping {from: to}`);
      for (const [from, to] of Object.entries(map))
        if (typeof to !== 'string' || to === '') throw new Error(`${context.name}: ${kind}.${from} must name a field`);
    }
    const out: TaskRow[] = [];
    rows.forEach((row, i) => {
      let mapped = row;
      const sources = [...Object.keys(o.copy), ...Object.keys(o.rename)];
      const missing = sources.find((from) => getField(row, from) === undefined);
      if (missing !== undefined) {
        if (o.onMissing === 'error')
          throw new Error(`${context.name}: row ${i} has no field '${missing}' (set on_missing: keep or drop to allow this)`);
        context.count('missing_field');
        if (o.onMissing === 'drop') return;
        out.push(row);
        return;
      }
      // copies read the row as it came in, renames then move fields: {copy: {a: b}, rename: {a: c}} gives b and c
      for (const [from, to] of Object.entries(o.copy)) mapped = setField(mapped, to, structuredClone(getField(row, from)));
      for (const [from, to] of Object.entries(o.rename)) {
        const value = getField(row, from);
        mapped = setField(deleteField(mapped, from), to, value);
      }
      out.push(mapped);
    });
    return out;
  },
};

TASK_OPERATORS.register('text_length_filter', textLengthFilter, textLengthFilter.description);
TASK_OPERATORS.register('field_format_filter', fieldFormatFilter, fieldFormatFilter.description);
TASK_OPERATORS.register('field_mapper', fieldMapper, fieldMapper.description);
