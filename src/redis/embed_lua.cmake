# Run as `cmake -DINPUT=<script.lua> -DOUTPUT=<file.cpp> -DNAME=<identifier> [-DENTRY=<function>]
# -P embed_lua.cmake`. Writes a .cpp that holds the script verbatim in a raw string literal, plus
# its SHA1 (the name EVALSHA knows it by, computed over the very same bytes that SCRIPT LOAD sends).
# With ENTRY, the script must end with `return <ENTRY>(KEYS, ARGV)`, and the .cpp holds it as a
# Redis Function library too (FUNCTION LOAD, Redis 7): named sluice_<script's stem>_<SHA1>, it
# registers ENTRY as the function of the same name in place of that last line, so that the
# script's prelude runs once per load instead of once per call.
file(READ "${INPUT}" script)
file(SHA1 "${INPUT}" sha1)
set(delimiter "sluice_lua")
string(FIND "${script}" ")${delimiter}\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${INPUT} contains the raw-string delimiter )${delimiter}\"")
endif()
get_filename_component(input_name "${INPUT}" NAME)
get_filename_component(stem "${INPUT}" NAME_WE)
set(library "")
set(function_name "")
if(ENTRY)
  set(last_line "return ${ENTRY}(KEYS, ARGV)\n")
  string(LENGTH "${script}" script_length)
  string(LENGTH "${last_line}" last_length)
  math(EXPR prelude_length "${script_length} - ${last_length}")
  if(prelude_length LESS 0)
    message(FATAL_ERROR "${INPUT} must end with the line `return ${ENTRY}(KEYS, ARGV)`")
  endif()
  string(SUBSTRING "${script}" ${prelude_length} -1 tail)
  if(NOT tail STREQUAL last_line)
    message(FATAL_ERROR "${INPUT} must end with the line `return ${ENTRY}(KEYS, ARGV)`")
  endif()
  string(SUBSTRING "${script}" 0 ${prelude_length} prelude)
  # Names may hold letters, digits and underscores only; the SHA1 keeps versions apart, so that
  # instances of two versions sharing one Redis (a rolling upgrade) never replace each other's.
  set(function_name "sluice_${stem}_${sha1}")
  set(library "#!lua name=${function_name}\n${prelude}")
  string(APPEND library "redis.register_function('${function_name}', ${ENTRY})\n")
endif()
set(text "// Generated from src/redis/${input_name} by src/redis/embed_lua.cmake: do not edit.\n")
string(APPEND text "#include \"sluice/redis/scripts.hpp\"\n\n")
string(APPEND text "namespace sluice::redis {\n\n")
string(APPEND text "const script ${NAME}{\n    R\"${delimiter}(${script})${delimiter}\",\n")
string(APPEND text "    \"${sha1}\",\n")
string(APPEND text "    R\"${delimiter}(${library})${delimiter}\",\n")
string(APPEND text "    \"${function_name}\"};\n\n")
string(APPEND text "} // namespace sluice::redis\n")
# Rewrite only on change, so that an unchanged script recompiles nothing.
if(EXISTS "${OUTPUT}")
  file(READ "${OUTPUT}" previous)
  if(previous STREQUAL text)
    return()
  endif()
endif()
file(WRITE "${OUTPUT}" "${text}")
