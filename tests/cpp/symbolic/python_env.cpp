// The embedded CPython of the test_symbolic executable (the version fastdyn is built for),
// started once for all its suites.
#include <Python.h>
#include <gtest/gtest.h>

namespace {

class PythonEnv : public ::testing::Environment {
 public:
  void SetUp() override {
    // An embedded interpreter finds its standard library from the home it was built with.
    PyConfig config;
    PyConfig_InitPythonConfig(&config);
    PyConfig_SetBytesString(&config, &config.home, FASTDYN_PYTHON_HOME);
    Py_InitializeFromConfig(&config);
    PyConfig_Clear(&config);
  }
  void TearDown() override { Py_FinalizeEx(); }
};
const auto* const kEnv = ::testing::AddGlobalTestEnvironment(new PythonEnv);

}  // namespace
