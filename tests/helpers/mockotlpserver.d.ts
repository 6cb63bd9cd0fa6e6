// The part of @elastic/mockotlpserver (a JavaScript package without types) the trace tests use:
// its OTLP receiver, started on a free port, handing each decoded export request to onTrace.

declare module '@elastic/mockotlpserver' {
  export class MockOtlpServer {
    constructor(opts?: {
      services?: Array<'http' | 'grpc' | 'ui'>;
      httpHostname?: string;
      httpPort?: number;
      logLevel?: string;
      /** Each decoded ExportTraceServiceRequest (protobufjs objects: ids as Buffers, 64-bit integers as Longs). */
      onTrace?: (request: any) => void;
    });
    start(): Promise<void>;
    close(): Promise<void>;
    /** Set once started. */
    httpUrl: URL | null;
  }
}
