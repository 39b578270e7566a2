import { InvalidArgumentError, Option, type Command } from 'commander';

function httpUrl(value: string): URL {
  if (!URL.canParse(value)) throw new InvalidArgumentError('must be the service address, like http://127.0.0.1:8080');
  const url = new URL(value);
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new InvalidArgumentError('must be an http(s) address');
  return url;
}

export function registerMcp(program: Command): void {
  program
    .command('mcp')
    .description(
      'an MCP tool server on stdin/stdout for agents (get_metrics, get_realtime, list_projects, create_project, track_event), ' +
        'relayed to the running service\'s /mcp endpoint with the given key; the key decides which tools are listed',
    )
    .addOption(new Option('--url <url>', 'base address of the service').env('ANALYTICS_URL').argParser(httpUrl).makeOptionMandatory())
    .addOption(new Option('--key <key>', 'API key: ak_ (admin), sk_ (project), pk_ (ingest only)').env('ANALYTICS_KEY').makeOptionMandatory())
    .action(async (opts: { url: URL; key: string }) => {
      const { bridgeStdio } = await import('../../mcp/stdio-bridge.ts');
      // stdout carries the protocol: every human-readable line goes to stderr
      await bridgeStdio({ url: opts.url, key: opts.key, log: (line) => process.stderr.write(`analytics mcp: ${line}\n`) });
      process.exit(0); // keep-alive sockets to the service would hold the process open for seconds
    });
}
