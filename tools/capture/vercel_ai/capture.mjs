// One Vercel AI SDK agent run against the fake model server, its spans written as OTLP/JSON.
//
//   node capture.mjs INTEGRATION BASE_URL AGENT PROMPT OUT [stream]
//
// INTEGRATION is "otel" (@ai-sdk/otel OpenTelemetry: GenAI semantic conventions) or "legacy"
// (@ai-sdk/otel LegacyOpenTelemetry: the ai.* attributes of AI SDK 3.3 to 6). generateText runs
// the tools of ../scripts.py with a Chat Completions model at BASE_URL, under the telemetry
// function id AGENT (streamText, its text stream read to the end, with "stream"); the finished
// spans are serialized by the SDK's own OTLP/JSON serializer (hex ids, one
// ExportTraceServiceRequest) into OUT. Run by capture_vercel_ai.py.
import { writeFileSync } from "node:fs";
import { createOpenAI } from "@ai-sdk/openai";
import { LegacyOpenTelemetry, OpenTelemetry } from "@ai-sdk/otel";
import { JsonTraceSerializer } from "@opentelemetry/otlp-transformer";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { NodeTracerProvider } from "@opentelemetry/sdk-trace-node";
import { generateText, stepCountIs, streamText, tool } from "ai";
import { z } from "zod";

const [integration, baseURL, agent, prompt, out, mode] = process.argv.slice(2);

const exporter = new InMemorySpanExporter();
const provider = new NodeTracerProvider({
  resource: resourceFromAttributes({ "service.name": "capture-vercel_ai" }),
  spanProcessors: [new SimpleSpanProcessor(exporter)],
});
provider.register(); // async-hooks context: nested spans get their parents
const tracer = provider.getTracer("capture-vercel-ai");
const telemetry =
  integration === "otel"
    ? new OpenTelemetry({ tracer, agentSpanName: "functionId" })
    : new LegacyOpenTelemetry({ tracer });

// The plain tools of scripts.py.
class CardDeclinedError extends Error {
  name = "CardDeclinedError";
}
const WEATHER = { Paris: "sunny, 21C", London: "rainy, 14C" };
const order = z.object({ order_id: z.string(), amount_usd: z.number() });
const tools = {
  lookup_order: tool({
    description: "Look up an order by its id.",
    inputSchema: z.object({ order_id: z.string() }),
    execute: async ({ order_id }) => ({ order_id, status: "delivered", total_usd: 25.0 }),
  }),
  issue_refund: tool({
    description: "Refund an amount in USD for an order.",
    inputSchema: order,
    execute: async ({ order_id, amount_usd }) => ({ refund_id: "R-77", order_id, amount_usd }),
  }),
  get_weather: tool({
    description: "Current weather for a city.",
    inputSchema: z.object({ city: z.string() }),
    execute: async ({ city }) => WEATHER[city] ?? "unknown",
  }),
  charge_card: tool({
    description: "Charge the customer's card for an order.",
    inputSchema: order,
    execute: async ({ order_id, amount_usd }) => {
      throw new CardDeclinedError(`card declined for order ${order_id} (${amount_usd.toFixed(2)} USD)`);
    },
  }),
};

const call = {
  model: createOpenAI({ baseURL, apiKey: "sk-fake" }).chat("gpt-4o"),
  system: "You are a helpful customer-support agent. Use the tools.",
  prompt,
  tools,
  stopWhen: stepCountIs(5),
  telemetry: { isEnabled: true, functionId: agent, integrations: [telemetry] },
};
try {
  if (mode === "stream") {
    const result = streamText({ ...call, onError: ({ error }) => console.error(`${error}`) });
    let text = "";
    for await (const piece of result.textStream) text += piece; // as a chat UI reads it
    console.error(`streamText answered ${JSON.stringify(text)}`);
  } else {
    await generateText(call);
  }
} catch (error) {
  console.error(`the run ended with ${error}`); // the spans still say what happened
}
await provider.forceFlush();
const spans = exporter.getFinishedSpans();
writeFileSync(out, new TextDecoder().decode(JsonTraceSerializer.serializeRequest(spans)) + "\n");
await provider.shutdown();
