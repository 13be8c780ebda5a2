// A data question an agent answers with E2B's code interpreter, run against
// airlock with the official @e2b/code-interpreter package, unmodified:
// upload a CSV, let pandas answer "which region brings in the most revenue,
// and by how much?", and get a bar chart back (the PNG and the data behind
// it). What a LangChain/LlamaIndex/OpenAI-Agents E2B tool does with the
// code an LLM wrote; here the code is fixed so the output can be checked.
//
//   E2B_API_KEY=... E2B_API_URL=http://127.0.0.1:3000 E2B_SANDBOX_URL=http://127.0.0.1:3000 \
//     node examples/code-interpreter/data_analyst.mjs [OUT_DIR]
//
// In your own project: `npm i @e2b/code-interpreter` and
// `import { Sandbox } from '@e2b/code-interpreter'`. Here the package is the
// one pinned in tests/e2e (scripts/setup installs it).
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'

const here = dirname(fileURLToPath(import.meta.url))
const { Sandbox } = createRequire(join(here, '../../tests/e2e/package.json'))('@e2b/code-interpreter')
const out = process.argv[2] || join(process.cwd(), 'out', 'code-interpreter')

const sbx = await Sandbox.create({ timeoutMs: 300000 }) // template code-interpreter-v1
try {
  await sbx.files.write('/home/user/sales.csv', readFileSync(join(here, 'sales.csv'), 'utf8'))

  const answer = await sbx.runCode(`
import pandas as pd
df = pd.read_csv('/home/user/sales.csv', parse_dates=['date'])
df['revenue'] = df.units * df.unit_price
by_region = df.groupby('region').revenue.sum().round(2).sort_values(ascending=False)
top, second = by_region.index[0], by_region.index[1]
print(f"{len(df)} sales, {df.revenue.sum():.2f} in revenue")
print(f"top region: {top} with {by_region[top]:.2f}, {by_region[top] - by_region[second]:.2f} ahead of {second}")
by_region.reset_index()
`, { onStdout: (m) => process.stdout.write(m.line) })
  if (answer.error) throw new Error(`${answer.error.name}: ${answer.error.value}`)
  const table = answer.results.find((r) => r.isMainResult)
  console.log('revenue by region:', JSON.stringify(table.data))

  const chart = await sbx.runCode(`
import matplotlib.pyplot as plt
plt.figure(figsize=(6, 4), dpi=100)
plt.bar(by_region.index, by_region.values)
plt.title('Revenue by region')
plt.xlabel('region')
plt.ylabel('revenue')
plt.show()
`)
  if (chart.error) throw new Error(`${chart.error.name}: ${chart.error.value}`)
  const fig = chart.results.find((r) => r.png)
  mkdirSync(out, { recursive: true })
  writeFileSync(join(out, 'revenue_by_region.png'), Buffer.from(fig.png, 'base64'))  // beside the demo's outputs
  console.log(`chart: ${fig.chart.type} "${fig.chart.title}" (${fig.chart.x_label} / ${fig.chart.y_label})`)
  for (const e of fig.chart.elements) console.log(`  ${e.label}: ${e.value}`)
  const png = Buffer.from(fig.png, 'base64')
  console.log(`png: ${png.readUInt32BE(16)}x${png.readUInt32BE(20)}, saved as revenue_by_region.png`)
} finally {
  await sbx.kill()
}
