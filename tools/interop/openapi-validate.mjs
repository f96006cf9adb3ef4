// Validates an OpenAPI document with an independent validator, @apidevtools/swagger-parser:
// the OpenAPI 3.x JSON Schema, every `$ref` resolved (a dangling one fails), and the spec's rules
// that a JSON Schema cannot express (unique operation ids, path parameters declared, …).
// Input on stdin: {"document": <the OpenAPI document>}. Output: {"valid": true, "openapi": "3.1.x",
// "paths": <count>} or {"valid": false, "error": "<what the validator said>"}; a broken script
// exits 1 (io.mjs).
import SwaggerParser from "@apidevtools/swagger-parser";
import { readJsonInput, required, run, writeJsonOutput } from "./io.mjs";

run(async () => {
  const input = await readJsonInput();
  // The parser resolves and dereferences in place: give it its own copy.
  const document = structuredClone(required(input, "document"));
  try {
    const api = await SwaggerParser.validate(document);
    writeJsonOutput({ valid: true, openapi: api.openapi, paths: Object.keys(api.paths ?? {}).length });
  } catch (error) {
    writeJsonOutput({ valid: false, error: String(error?.message ?? error) });
  }
});
