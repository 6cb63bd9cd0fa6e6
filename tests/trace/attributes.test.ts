// The small rules of lib/trace/attributes.ts on their own: error.type from a row's outcome and what
// the exchange knew, server.address/server.port from a Host header, the output limit a body sends.

import t from 'tap';
import { errorTypeOf, hostOf, maxTokensOf, type ExchangeFacts } from '../../lib/trace/attributes.ts';

const ex = (o: Partial<ExchangeFacts>): ExchangeFacts => ({ upstreamStatus: 200, timedOut: false, upstreamEnded: true, tap: null, ...o });

t.test('error.type of each ending', async (t) => {
  t.equal(errorTypeOf('ok', ex({})), undefined);
  t.equal(errorTypeOf('client_disconnect', ex({ upstreamEnded: false })), undefined, 'a hang-up is no error');
  t.equal(errorTypeOf('gateway_error', ex({ upstreamEnded: false })), 'shutting_down');
  t.equal(errorTypeOf('upstream_error', ex({ upstreamStatus: 503 })), '503', 'the router\'s status');
  t.equal(errorTypeOf('upstream_error', ex({ upstreamStatus: 0, upstreamEnded: false })), 'upstream_unreachable');
  t.equal(errorTypeOf('upstream_error', ex({ upstreamStatus: 0, upstreamEnded: false, timedOut: true })), 'upstream_timeout');
  t.equal(errorTypeOf('upstream_error', ex({ upstreamEnded: false })), 'upstream_stream_failed', 'cut mid-response');
  t.equal(errorTypeOf('upstream_error', ex({ upstreamEnded: false, timedOut: true })), 'upstream_timeout', 'silent mid-response');
  t.equal(errorTypeOf('upstream_error', ex({})), 'upstream_error_event', 'an error inside a 200');
});

t.test('server.address and server.port from Host', async (t) => {
  t.same(hostOf('gw.example:8443'), { address: 'gw.example', port: 8443 });
  t.same(hostOf('gw.example'), { address: 'gw.example', port: 80 });
  t.same(hostOf('[::1]:8080'), { address: '::1', port: 8080 });
  t.equal(hostOf(undefined), undefined);
  t.equal(hostOf(':80'), undefined);
  t.equal(hostOf('a:b:c'), undefined);
});

t.test('the output limit each dialect sends', async (t) => {
  t.equal(maxTokensOf('chat', { max_tokens: 10 }), 10);
  t.equal(maxTokensOf('chat', { max_completion_tokens: 20, max_tokens: 10 }), 20, 'max_completion_tokens first');
  t.equal(maxTokensOf('messages', { max_tokens: 30 }), 30);
  t.equal(maxTokensOf('responses', { max_output_tokens: 40, max_tokens: 1 }), 40);
  t.equal(maxTokensOf('chat', {}), undefined);
  t.equal(maxTokensOf('chat', { max_tokens: '10' }), undefined, 'only a number');
});
