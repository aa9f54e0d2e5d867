# cmake -DINPUT=file -DOUTPUT=header -DNAMESPACE=ns -DVAR=name -P embed_text.cmake
file(READ ${INPUT} CONTENT)
file(WRITE ${OUTPUT} "#pragma once\n// Generated from ${INPUT}; do not edit.\nnamespace ${NAMESPACE} {\ninline constexpr const char* ${VAR} = R\"xpuembed(${CONTENT})xpuembed\";\n}\n")
