// A chat request's tools[i].function.parameters must be a JSON Schema object (src/openai/json-schema.ts): a broken
// schema is a 400 naming the place inside it and what is wrong, and one nested thousands deep is refused by its depth,
// not by "Maximum call stack size exceeded" blamed on `messages` when the template rendered it.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ChatCompletionRequestSchema, OpenAIHttpError, parseRequest } from '../../src/openai/index.js';

const withParameters = (parameters: unknown) => ({
  model: 'm',
  messages: [{ role: 'user', content: 'hi' }],
  tools: [
    { type: 'function', function: { name: 'ok', parameters: { type: 'object' } } },
    { type: 'function', function: { name: 'f', parameters } },
  ],
});

function refusal(body: unknown): OpenAIHttpError {
  try {
    parseRequest(ChatCompletionRequestSchema, body);
  } catch (error) {
    assert.ok(error instanceof OpenAIHttpError, String(error));
    assert.equal(error.status, 400);
    return error;
  }
  assert.fail(`accepted ${JSON.stringify(body).slice(0, 200)}`);
}

/** `{ type: 'object', properties: { a: ... } }` nested `depth` schemas deep, built without recursion. */
function nestedSchema(depth: number): Record<string, unknown> {
  let schema: Record<string, unknown> = { type: 'string' };
  for (let i = 1; i < depth; i++) schema = { type: 'object', properties: { a: schema } };
  return schema;
}

describe("a tool's parameters are a JSON Schema object", () => {
  it('accepts schemas as clients write them', () => {
    for (const parameters of [
      {},
      { type: 'object' },
      { type: 'object', properties: { a: {}, b: true } },
      {
        type: 'object',
        properties: {
          city: { type: 'string', enum: ['Paris', 'Oslo'] },
          days: { type: ['integer', 'null'], default: 1 },
          tags: { type: 'array', items: { type: 'string' } },
          at: { anyOf: [{ type: 'string' }, { $ref: '#/$defs/point' }] },
        },
        required: ['city'],
        additionalProperties: false,
        $defs: { point: { type: 'object', properties: { x: { type: 'number' } } } },
      },
      nestedSchema(32),
    ])
      parseRequest(ChatCompletionRequestSchema, withParameters(parameters));
  });

  it('refuses a broken schema with a 400 naming where and what', () => {
    const cases: Array<[unknown, string, RegExp]> = [
      [{ type: 'string' }, 'tools.1.function.parameters.type', /schema of type 'object'; received string "string"/],
      [{ type: 'objekt' }, 'tools.1.function.parameters.type', /type 'object'; received string "objekt"/],
      [
        { type: 'object', properties: 5 },
        'tools.1.function.parameters.properties',
        /must be an object of schemas by name; received number/,
      ],
      [
        { type: 'object', properties: { a: { type: 'strin' } } },
        'tools.1.function.parameters.properties.a.type',
        /must be one of object, array, string.*; received string "strin"/,
      ],
      [
        { properties: { a: 'string' } },
        'tools.1.function.parameters.properties.a',
        /must be a JSON Schema \(an object or a boolean\)/,
      ],
      [{ type: 'object', required: 'a' }, 'tools.1.function.parameters.required', /must be a list of property names/],
      [{ anyOf: [] }, 'tools.1.function.parameters.anyOf', /must be a non-empty list of schemas/],
      [
        { properties: { a: { items: [{ type: 1 }] } } },
        'tools.1.function.parameters.properties.a.items.0.type',
        /must be one of/,
      ],
    ];
    for (const [parameters, param, message] of cases) {
      const error = refusal(withParameters(parameters));
      assert.equal(error.param, param, JSON.stringify(parameters));
      assert.match(error.message, message, JSON.stringify(parameters));
      assert.ok(error.message.startsWith(`'${param}': `), error.message);
    }
  });

  it('refuses schemas nested past the bound by their depth, however deep (no stack overflow)', () => {
    for (const depth of [33, 100_000]) {
      const error = refusal(withParameters(nestedSchema(depth)));
      assert.match(error.message, /schemas nest more than 32 deep/);
      // the 33rd schema: 32 steps of properties.a below the top
      assert.equal(error.param, `tools.1.function.parameters${'.properties.a'.repeat(32)}`);
    }
    let value: unknown = 1;
    for (let i = 0; i < 100_000; i++) value = [value];
    const deepDefault = refusal(withParameters({ type: 'object', default: value }));
    assert.equal(deepDefault.param, 'tools.1.function.parameters.default');
    assert.match(deepDefault.message, /nests more than 32 levels deep/);
    const kwargs = refusal({ ...withParameters({}), chat_template_kwargs: { x: value } });
    assert.equal(kwargs.param, 'chat_template_kwargs');
    assert.match(kwargs.message, /nests more than 32 levels deep/);
  });
});
