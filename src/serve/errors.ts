// API errors and their wire shapes. Every failure a request can cause is an ApiError (or a fastify
// error with a status) and leaves as the API's own shape: OpenAI `{"error": {message, type, param,
// code}}`, Anthropic `{"type": "error", "error": {type, message}}`.

/** `not_found`: no such route (OpenAI's `code` null, as its "Invalid URL"); `model_not_found`: no such model. */
export type ErrorKind = 'invalid_request' | 'authentication' | 'not_found' | 'model_not_found' | 'too_large' | 'unavailable' | 'server';

export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly kind: ErrorKind = 'invalid_request',
    readonly param: string | null = null,
  ) {
    super(message);
    this.name = 'ApiError';
  }
}

export const badRequest = (message: string, param: string | null = null) => new ApiError(400, message, 'invalid_request', param);

/** `feature` is not implemented by this server: a 400 that says so (never silently ignored). */
export const unsupported = (param: string, what: string) =>
  new ApiError(400, `${what} is not supported by this server`, 'invalid_request', param);

export type ApiFlavor = 'openai' | 'anthropic';

/** Which API's error shape a route answers with (`route`: the matched route, or the decoded path of an unknown one). */
export function flavorOf(route: string): ApiFlavor {
  return route === '/v1/messages' || route.startsWith('/v1/messages/') ? 'anthropic' : 'openai';
}

const OPENAI_TYPE: Record<ErrorKind, string> = {
  invalid_request: 'invalid_request_error',
  authentication: 'invalid_request_error',
  not_found: 'invalid_request_error',
  model_not_found: 'invalid_request_error',
  too_large: 'invalid_request_error',
  unavailable: 'server_error',
  server: 'server_error',
};

const OPENAI_CODE: Partial<Record<ErrorKind, string>> = {
  authentication: 'invalid_api_key',
  model_not_found: 'model_not_found',
  too_large: 'request_too_large',
};

const ANTHROPIC_TYPE: Record<ErrorKind, string> = {
  invalid_request: 'invalid_request_error',
  authentication: 'authentication_error',
  not_found: 'not_found_error',
  model_not_found: 'not_found_error',
  too_large: 'request_too_large',
  // 503 (loading, shutting down): api_error. Anthropic's overloaded_error goes with status 529, which
  // load balancers and health checks do not know; both SDKs retry any 5xx alike.
  unavailable: 'api_error',
  server: 'api_error',
};

export function errorBody(flavor: ApiFlavor, e: ApiError): object {
  if (flavor === 'anthropic') return { type: 'error', error: { type: ANTHROPIC_TYPE[e.kind], message: e.message } };
  return { error: { message: e.message, type: OPENAI_TYPE[e.kind], param: e.param, code: OPENAI_CODE[e.kind] ?? null } };
}

function kindOfStatus(status: number): ErrorKind {
  if (status === 401) return 'authentication';
  if (status === 404) return 'not_found';
  if (status === 413) return 'too_large';
  if (status === 503 || status === 529) return 'unavailable';
  if (status >= 500) return 'server';
  return 'invalid_request';
}

/** Any error thrown while handling a request -> an ApiError (validation and body errors keep their 4xx status). */
export function toApiError(err: unknown, contentType?: string): ApiError {
  if (err instanceof ApiError) return err;
  const e = err as { statusCode?: number; message?: string; validation?: Array<{ instancePath?: string; keyword?: string; params?: Record<string, unknown> }>; code?: string };
  const status = typeof e.statusCode === 'number' && e.statusCode >= 400 && e.statusCode < 600 ? e.statusCode : 500;
  if (status === 415) {
    return new ApiError(415, `the request body must be JSON sent with content-type: application/json (this one came as ${contentType ?? 'no content type'})`);
  }
  if (e.validation && e.validation.length) {
    const v = e.validation[0]!;
    if ((v.instancePath ?? '') === '' && v.keyword === 'type') {
      return new ApiError(400, 'the request body must be a JSON object (content-type: application/json)');
    }
    const missing = typeof v.params?.missingProperty === 'string' ? `/${v.params.missingProperty}` : '';
    const param = `${v.instancePath ?? ''}${missing}`.replace(/^\//, '').replace(/\//g, '.') || null;
    return new ApiError(400, `invalid request: ${e.message ?? 'validation failed'}`, 'invalid_request', param);
  }
  if (status === 413) return new ApiError(413, `request body too large: ${e.message ?? ''}`.trim(), 'too_large');
  if (status >= 500) return new ApiError(status, `internal error: ${e.message ?? String(err)}`, kindOfStatus(status));
  return new ApiError(status, e.message ?? 'bad request', kindOfStatus(status));
}
