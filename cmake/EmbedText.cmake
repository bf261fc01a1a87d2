# Writes a text file into a C++ source as one raw string constant, so that a
# page strata serves (the dashboard) is edited as the HTML it is and still
# ships inside the binary.
# Usage: cmake -DINPUT=page.html -DOUTPUT=page.inc -DNAME=kPage -P EmbedText.cmake
file(READ "${INPUT}" text)
string(FIND "${text}" ")strata_embed\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${INPUT} holds the raw-string delimiter )strata_embed\"")
endif()
file(WRITE "${OUTPUT}.tmp"
     "// Generated from ${INPUT} by cmake/EmbedText.cmake; do not edit.\n"
     "constexpr char ${NAME}[] = R\"strata_embed(${text})strata_embed\";\n")
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")
