// The vision-language families by config.json's model_type, for callers that take any of them (the rollout engine,
// the trainer, the dataset's image checks): which model class loads a folder, its config parser and its image
// processor's defaults (preprocessor_config.json's keys override them).
//
//   model_type   model            processor defaults
//   qwen2_5_vl   Qwen2_5VLModel   QWEN2_VL_IMAGE_PROCESSOR (patch 14, CLIP mean/std)
//   qwen3_vl     Qwen3VLModel     QWEN3_VL_IMAGE_PROCESSOR (patch 16, mean = std = 0.5)
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { readRegularFile } from '../../util/index.js';
import { ModelConfigError } from '../config.js';
import { isObject, parseQwen2_5VLConfig, readConfigJson } from './config.js';
import { parseQwen3VLConfig } from './config-qwen3-vl.js';
import {
  type ImageProcessorConfig,
  loadImageProcessorConfig,
  QWEN2_VL_IMAGE_PROCESSOR,
  QWEN3_VL_IMAGE_PROCESSOR,
} from './image-processor.js';
import { Qwen2_5VLModel } from './qwen2-5-vl.js';
import { Qwen3VLModel } from './qwen3-vl.js';
import type { LoadVisionLanguageOptions, VisionLanguageConfig, VisionLanguageModel } from './vision-language-model.js';

interface Family {
  parse(raw: Record<string, unknown>, file: string): VisionLanguageConfig;
  load(dir: string, options: LoadVisionLanguageOptions): VisionLanguageModel;
  processor: ImageProcessorConfig;
}

const FAMILIES: Record<string, Family> = {
  qwen2_5_vl: { parse: parseQwen2_5VLConfig, load: Qwen2_5VLModel.load, processor: QWEN2_VL_IMAGE_PROCESSOR },
  qwen3_vl: { parse: parseQwen3VLConfig, load: Qwen3VLModel.load, processor: QWEN3_VL_IMAGE_PROCESSOR },
};

/** The model_types of the vision-language families. */
export const VISION_LANGUAGE_MODEL_TYPES: readonly string[] = Object.keys(FAMILIES);

/** Whether a parsed config.json is a vision-language model's (Qwen2.5-VL or Qwen3-VL). */
export const isVisionLanguageConfig = (raw: Record<string, unknown>): boolean =>
  typeof raw.model_type === 'string' && Object.hasOwn(FAMILIES, raw.model_type);

function familyOf(dirOrFile: string): { family: Family; raw: Record<string, unknown>; file: string } {
  const { raw, file } = readConfigJson(dirOrFile);
  const family =
    typeof raw.model_type === 'string' && Object.hasOwn(FAMILIES, raw.model_type) ? FAMILIES[raw.model_type] : undefined;
  if (family === undefined)
    throw new ModelConfigError(
      file,
      'model_type',
      `expected a vision-language model (${VISION_LANGUAGE_MODEL_TYPES.join(', ')}), got ${JSON.stringify(raw.model_type)}`,
    );
  return { family, raw, file };
}

/** Whether a model folder holds a vision-language model (its config.json's model_type is one of the families'). */
export function isVisionLanguageFolder(dir: string): boolean {
  const file = join(dir, 'config.json');
  if (!existsSync(file)) return false;
  try {
    const raw = JSON.parse(readRegularFile(file, 'utf8')) as unknown;
    return isObject(raw) && isVisionLanguageConfig(raw);
  } catch {
    return false; // the model loader names what is wrong with the file
  }
}

/** Reads a vision-language model folder's config.json (either family). */
export function loadVisionLanguageConfig(dirOrFile: string): VisionLanguageConfig {
  const { family, raw, file } = familyOf(dirOrFile);
  return family.parse(raw, file);
}

/** Loads a vision-language model folder with its family's class. */
export function loadVisionLanguageModel(dir: string, options: LoadVisionLanguageOptions = {}): VisionLanguageModel {
  return familyOf(dir).family.load(dir, options);
}

/** The image processor defaults of a config's family (a model built in memory, without its folder's file). */
export function imageProcessorDefaults(config: VisionLanguageConfig): ImageProcessorConfig {
  return (FAMILIES[String(config.raw.model_type)] as Family).processor;
}

/** A vision-language folder's image processor: its processor config (../image-processor.ts) over its family's defaults. */
export function loadVisionImageProcessor(dir: string): ImageProcessorConfig {
  return loadImageProcessorConfig(dir, familyOf(dir).family.processor);
}
