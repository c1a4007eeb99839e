# One interface target carries the project's warning flags, so that every
# first-party target opts in explicitly and generated code (protobuf, gRPC)
# does not.
add_library(tpool_warnings INTERFACE)
add_library(tpool::warnings ALIAS tpool_warnings)
target_compile_options(tpool_warnings INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wold-style-cast -Wcast-align
  -Woverloaded-virtual -Wnull-dereference -Wimplicit-fallthrough
  $<$<BOOL:${TPOOL_WERROR}>:-Werror>)
