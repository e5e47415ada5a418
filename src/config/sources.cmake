list(APPEND SLUICE_CORE_SOURCES
  src/config/environment.cpp
  src/config/limits.cpp
  src/config/loader.cpp
  src/config/rules.cpp
  src/config/scalars.cpp
  src/config/text_checks.cpp
  src/config/warnings.cpp
  src/config/yaml_documents.cpp
  src/config/yaml_reader.cpp)
