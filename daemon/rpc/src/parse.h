// Requests and replies as bytes, for the raw (ByteBuffer) methods: the
// daemon parses them itself so that bytes that are not a valid message get an
// answer that says so (gRPC's typed callback methods answer UNIMPLEMENTED with
// an empty message for a unary request, and report a failed read like the end
// of the stream for a streaming one).
#pragma once

#include <grpcpp/grpcpp.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/server_interceptor.h>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tpool/v1/jobs.pb.h"

namespace tpool::rpc {

// Parses bytes into out (cleared first); false if they are not a valid
// message of out's type. Consumes bytes.
bool parse_bytes(grpc::ByteBuffer& bytes, google::protobuf::MessageLite& out);

// INVALID_ARGUMENT: "the request could not be parsed as <type_name>; ...".
grpc::Status unparsable_request(const std::string& type_name);

// The bytes a result takes as one entry of a ResultBatch: its own size plus
// the field's tag and length prefix (at most 6 bytes).
std::uint64_t batch_entry_bytes(const tpool::v1::JobResult& r);

// One JobRequest's fields as views: into an upstream message's own bytes
// (parse_plain_batch) or into a parsed JobRequest (request_fields). to_spec
// (convert.h) reads them, whichever way they were parsed.
struct RequestFields {
  std::string_view handler;
  std::string_view payload;
  std::string_view idempotency_key;
  // Only a parsed JobRequest has labels: parse_plain_batch leaves a message
  // with labels to protobuf.
  const google::protobuf::Map<std::string, std::string>* labels = nullptr;
  std::int32_t lane = 0;
  std::uint64_t timeout_ms = 0;
  std::uint64_t tag = 0;
  std::uint32_t max_attempts = 0;
  std::uint32_t backoff_base_ms = 0;
  std::uint32_t backoff_cap_ms = 0;
  std::uint64_t delay_ms = 0;
  std::uint64_t not_before_unix_ms = 0;
  bool durable = false;
};
RequestFields request_fields(const tpool::v1::JobRequest& r);

// The Stream's parse of an upstream JobBatch without protobuf's message
// objects (issue 19: protobuf's parse, its arena strings and to_spec's copies
// were ~1,900 instructions per Stream job). It reads the plain form every
// client sends: each JobRequest's fields at most once each, in one-byte tags,
// with their own wire types, handler and idempotency_key in ASCII, lane and
// the uint32 fields in range, durable 0 or 1, and no labels. For such bytes
// it appends one RequestFields per job to out, viewing into bytes, and returns
// true: exactly the fields protobuf's parse would give (tests/unit/rpc and
// the job_request fuzz target check it against protobuf). For anything else,
// valid or not, it returns false (out as it was) and the caller parses with
// protobuf, which decides: this never rejects what protobuf accepts.
bool parse_plain_batch(std::string_view bytes, std::vector<RequestFields>& out);

// A JobBatch's bytes as its items' fields (the Stream's messages and
// SubmitBatch's request): in's bytes copied into `bytes` (one block), then
// parse_plain_batch's views into them, or, for anything but the plain form,
// protobuf's parse of them onto `arena` and views into that. Appends to items;
// false if the bytes are not a JobBatch.
bool read_job_batch(const grpc::ByteBuffer& in, std::string& bytes, google::protobuf::Arena& arena,
                    std::vector<RequestFields>& items);

// A JobResult's fields as views: what fill_result (convert.h) sets, and what
// the Stream encodes without building the message (batch_entry below).
struct ResultFields {
  std::uint64_t job_id = 0;
  tpool::v1::JobState state = tpool::v1::JOB_STATE_UNSPECIFIED;
  std::string_view output;
  std::string_view message;
  std::uint64_t tag = 0;
  std::int32_t code = 0;
  std::uint64_t wait_us = 0;
  std::uint64_t run_us = 0;
  std::string_view replica;
  std::uint32_t attempts = 0;
};

// A result as one entry of a ResultBatch, written from its fields: the same
// bytes as batch_entry of the JobResult with those fields (protobuf's own
// encoding: fields in number order, proto3 defaults omitted), without the
// message object, its string copies and its two passes (issue 19: ~1,350
// instructions per Stream job went to fill_result and batch_entry). A result
// whose entry would exceed max_bytes becomes fit_result's FAILED result.
// Kept in step with jobs.proto by a test that checks JobResult's fields
// against the ones written here and the bytes against protobuf's.
std::string batch_entry(ResultFields f, std::uint64_t max_bytes);

// A result as one entry of a ResultBatch on the wire: field 1's tag, the
// length, the JobResult's bytes. A ResultBatch is its entries one after the
// other (the message has that one field), so a reply can be made by joining
// entries serialized earlier, each where its result was made (stream.cc, S13).
std::string batch_entry(const tpool::v1::JobResult& r);
// Sets the tag of the result in an entry made by batch_entry (parsed,
// changed, serialized again: for the rare result that needs it).
void retag_entry(std::string& entry, std::uint64_t tag);
// The entries, one after the other, as one message in out (replacing it):
// one slice, one copy of each entry.
void join_entries(std::span<const std::string> entries, grpc::ByteBuffer& out);

// A result too large for one reply of max_bytes becomes a FAILED result that
// says so (its output is dropped): a result is delivered or reported failed,
// never silently lost. True if r was changed.
bool fit_result(tpool::v1::JobResult& r, std::uint64_t max_bytes);

// A server interceptor for the typed unary methods: when a request's bytes do
// not parse, gRPC's callback API answers UNIMPLEMENTED with an empty message
// before any service code runs (CallbackUnaryHandler::RunHandler); this turns
// that answer into unparsable_request() for the method's request type.
// Streaming calls pass through (Stream parses its own messages).
class UnparsableRequestInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override;
};

}  // namespace tpool::rpc
