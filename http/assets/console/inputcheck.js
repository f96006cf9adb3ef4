// The console's input check before a hire: what a JSON Schema says that is cheap and certain to
// check in the page (the gateway validates every input in full). Shared by the API-key hire
// (hire.js) and the wallet hire (wallethire.js).

function isObject(value) {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

function hasType(value, type) {
  switch (type) {
    case "object": return isObject(value);
    case "array": return Array.isArray(value);
    case "string": return typeof value === "string";
    case "boolean": return typeof value === "boolean";
    case "null": return value === null;
    case "number": return typeof value === "number";
    case "integer": return Number.isInteger(value);
    default: return true;
  }
}

function pointer(path, key) {
  return `${path}/${String(key).replace(/~/g, "~0").replace(/\//g, "~1")}`;
}

/**
 * Where `value` breaks `schema`, as `{path, message}`, checking only what is cheap and certain
 * in the page: `type`, `required`, `properties`, `additionalProperties: false`, `items` and
 * scalar `enum`/`const`. Each only adds a constraint, so an input refused here is refused by the
 * gateway too; the rest (lengths, patterns, formats, references, combinators) is the gateway's,
 * which validates every input in full and names the failing paths in its answer.
 */
export function cheapViolations(schema, value, path = "") {
  if (schema === false) return [{ path: path || "/", message: "no value is allowed here" }];
  // `$ref` siblings are ignored before draft 2019-09: such a level is left to the gateway.
  if (!isObject(schema) || "$ref" in schema) return [];
  const here = path || "/";
  if (schema.type !== undefined) {
    const types = Array.isArray(schema.type) ? schema.type : [schema.type];
    if (!types.some((t) => hasType(value, t))) return [{ path: here, message: `must be ${types.join(" or ")}` }];
  }
  const scalar = (v) => v === null || typeof v !== "object";
  const out = [];
  if (Array.isArray(schema.enum) && schema.enum.every(scalar) && !schema.enum.includes(value)) {
    out.push({ path: here, message: `must be one of ${schema.enum.map((v) => JSON.stringify(v)).join(", ")}` });
  }
  if ("const" in schema && scalar(schema.const) && schema.const !== value) {
    out.push({ path: here, message: `must be ${JSON.stringify(schema.const)}` });
  }
  if (isObject(value)) {
    for (const key of Array.isArray(schema.required) ? schema.required : []) {
      if (!Object.hasOwn(value, key)) out.push({ path: here, message: `"${key}" is required` });
    }
    const properties = isObject(schema.properties) ? schema.properties : {};
    const closed = schema.additionalProperties === false && !schema.patternProperties;
    for (const [key, item] of Object.entries(value)) {
      if (Object.hasOwn(properties, key)) out.push(...cheapViolations(properties[key], item, pointer(path, key)));
      else if (closed) out.push({ path: pointer(path, key), message: "is not an allowed property" });
    }
  }
  if (Array.isArray(value) && isObject(schema.items)) {
    value.forEach((item, index) => out.push(...cheapViolations(schema.items, item, pointer(path, index))));
  }
  return out;
}
