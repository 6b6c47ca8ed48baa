// A JSON Schema checker for the subset of keywords docs/protocol/*.schema.json
// use, so that the tests can check every message the worker sends (and
// every one they send it) against the spec without a dependency.
import { readFileSync } from "node:fs";

type Schema = Record<string, unknown>;

const dir = new URL("../../../docs/protocol/", import.meta.url);

const cache = new Map<string, Schema>();

/** load reads docs/protocol/<name>.schema.json. */
function load(name: string): Schema {
  let s = cache.get(name);
  if (!s) {
    s = JSON.parse(readFileSync(new URL(`${name}.schema.json`, dir), "utf8")) as Schema;
    cache.set(name, s);
  }
  return s;
}

/** checkMessage throws an Error listing every way text breaks docs/protocol/<name>.schema.json. */
export function checkMessage(name: "heartbeat" | "result" | "delivery" | "control", text: string): void {
  const root = load(name);
  const errs: string[] = [];
  check(root, root, JSON.parse(text), "", errs);
  if (errs.length > 0) throw new Error(`${name} breaks its schema: ${errs.join("; ")}\n${text}`);
}

const known = new Set([
  "$schema", "$id", "title", "description", "type", "properties", "required", "additionalProperties", "enum", "const",
  "minimum", "maximum", "minLength", "maxLength", "pattern", "format", "items", "maxItems", "$ref", "anyOf", "$defs",
]);

function check(root: Schema, s: Schema, v: unknown, at: string, errs: string[]): void {
  for (const k of Object.keys(s)) {
    if (!known.has(k)) throw new Error(`schema keyword ${k} at ${at || "/"} is not checked by test/schema.ts`);
  }
  if (typeof s.$ref === "string") {
    const m = /^#\/\$defs\/(.+)$/.exec(s.$ref);
    if (!m) throw new Error(`unsupported $ref ${s.$ref}`);
    check(root, (root.$defs as Record<string, Schema>)[m[1]!]!, v, at, errs);
  }
  if (Array.isArray(s.anyOf)) {
    const ok = (s.anyOf as Schema[]).some((sub) => {
      const e: string[] = [];
      check(root, sub, v, at, e);
      return e.length === 0;
    });
    if (!ok) errs.push(`${at}: matches none of anyOf`);
  }
  if (s.type !== undefined) {
    const types = Array.isArray(s.type) ? (s.type as string[]) : [s.type as string];
    if (!types.some((t) => isType(v, t))) {
      errs.push(`${at}: ${JSON.stringify(v)} is not ${types.join(" or ")}`);
      return;
    }
  }
  if (s.const !== undefined && v !== s.const) errs.push(`${at}: not ${JSON.stringify(s.const)}`);
  if (Array.isArray(s.enum) && !s.enum.includes(v)) errs.push(`${at}: ${JSON.stringify(v)} not in ${JSON.stringify(s.enum)}`);
  if (typeof v === "number") {
    if (typeof s.minimum === "number" && v < s.minimum) errs.push(`${at}: ${v} < ${s.minimum}`);
    if (typeof s.maximum === "number" && v > s.maximum) errs.push(`${at}: ${v} > ${s.maximum}`);
  }
  if (typeof v === "string") {
    const n = [...v].length;
    if (typeof s.minLength === "number" && n < s.minLength) errs.push(`${at}: shorter than ${s.minLength}`);
    if (typeof s.maxLength === "number" && n > s.maxLength) errs.push(`${at}: longer than ${s.maxLength}`);
    if (typeof s.pattern === "string" && !new RegExp(s.pattern, "u").test(v)) errs.push(`${at}: ${JSON.stringify(v)} does not match ${s.pattern}`);
    if (s.format === "date-time" && !/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$/.test(v)) errs.push(`${at}: ${v} is not RFC 3339`);
  }
  if (Array.isArray(v)) {
    if (typeof s.maxItems === "number" && v.length > s.maxItems) errs.push(`${at}: more than ${s.maxItems} items`);
    if (s.items) v.forEach((x, i) => check(root, s.items as Schema, x, `${at}/${i}`, errs));
  }
  if (v !== null && typeof v === "object" && !Array.isArray(v)) {
    const o = v as Record<string, unknown>;
    const props = (s.properties ?? {}) as Record<string, Schema>;
    for (const r of (s.required ?? []) as string[]) if (!(r in o)) errs.push(`${at}: ${r} is missing`);
    for (const [k, x] of Object.entries(o)) {
      if (props[k]) check(root, props[k], x, `${at}/${k}`, errs);
      else if (s.additionalProperties === false) errs.push(`${at}: ${k} is not in the schema`);
    }
  }
}

function isType(v: unknown, t: string): boolean {
  switch (t) {
    case "object":
      return v !== null && typeof v === "object" && !Array.isArray(v);
    case "array":
      return Array.isArray(v);
    case "string":
      return typeof v === "string";
    case "integer":
      return Number.isInteger(v);
    case "number":
      return typeof v === "number";
    case "boolean":
      return typeof v === "boolean";
    case "null":
      return v === null;
  }
  throw new Error(`unsupported type ${t}`);
}
