import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';
import { openApiDocument } from '../src/http/openapi.ts';
import { VERSION } from '../src/service.ts';

/**
 * Checks an HTTP answer against the OpenAPI document the service serves: the operation must list the status, and
 * a JSON body must match that response's schema. Used by `api()` in helpers.ts, so every HTTP suite checks every
 * answer it receives. Paths and methods the document does not describe (a 404 route, a 405) are not checked.
 */

type Json = Record<string, any>;

const doc = openApiDocument(VERSION) as Json;
const addFormats = addFormatsModule as unknown as (ajv: Ajv2020) => void;
const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats(ajv);
ajv.addSchema({ $id: 'doc', components: doc.components }, 'doc');

const templates = Object.keys(doc.paths as Json).map((template) => ({
  template,
  pattern: new RegExp(`^${template.replace(/\{[^}]+\}/g, '[^/]+').replace(/\./g, '\\.')}$`),
}));

const validators = new Map<string, ReturnType<typeof ajv.compile>>();

/** Rewrites `#/components/...` refs to the schema registered as `doc`. */
function rebase(schema: unknown): unknown {
  if (Array.isArray(schema)) return schema.map(rebase);
  if (schema && typeof schema === 'object') {
    const out: Json = {};
    for (const [k, v] of Object.entries(schema)) out[k] = k === '$ref' && typeof v === 'string' && v.startsWith('#/') ? `doc${v}` : rebase(v);
    return out;
  }
  return schema;
}

export function conformanceProblem(method: string, route: string, status: number, contentType: string | null, body: unknown): string | undefined {
  const pathname = route.split('?')[0]!;
  const found = templates.find((t) => t.pattern.test(pathname));
  if (!found) return undefined;
  const operation = (doc.paths as Json)[found.template][method.toLowerCase()] as Json | undefined;
  if (!operation) return undefined;
  const response = operation.responses[String(status)] ?? operation.responses.default;
  if (!response) return `${method} ${found.template} answered ${status}, which the document does not list`;
  if (!contentType?.startsWith('application/json')) return undefined;
  const schema = response.content?.['application/json']?.schema;
  if (!schema) return `${method} ${found.template} ${status} answered JSON the document does not describe`;
  const key = `${method} ${found.template} ${status}`;
  let validate = validators.get(key);
  if (!validate) {
    validate = ajv.compile(rebase(schema) as Json);
    validators.set(key, validate);
  }
  if (validate(body)) return undefined;
  return `${key} does not match the document: ${ajv.errorsText(validate.errors)} in ${JSON.stringify(body).slice(0, 300)}`;
}
