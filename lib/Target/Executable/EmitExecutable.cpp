//===- EmitExecutable.cpp - A stand-alone executable for one job ---------===//

#include "pipeforge/Target/Executable/EmitExecutable.h"

#include "llvm/IR/Constants.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/Verifier.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FileUtilities.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Target/TargetOptions.h"
#include "llvm/TargetParser/Host.h"

using namespace llvm;

namespace pipeforge::target {

namespace {

/// @pipeforge_program = private constant [N x i8] c"..."
/// define i32 @main(i32 %argc, ptr %argv) {
///   %r = call i32 @pipeforge_rt_main_embedded(i32 %argc, ptr %argv,
///                                             ptr @pipeforge_program, i64 N)
///   ret i32 %r
/// }
std::unique_ptr<Module> buildModule(LLVMContext &ctx, StringRef program) {
  auto mod = std::make_unique<Module>("pipeforge-executable", ctx);
  Type *i8 = Type::getInt8Ty(ctx);
  Type *i32 = Type::getInt32Ty(ctx);
  Type *i64 = Type::getInt64Ty(ctx);
  Type *ptr = PointerType::getUnqual(ctx);
  Constant *bytes = ConstantDataArray::getRaw(program, program.size(), i8);
  auto *gv = new GlobalVariable(*mod, bytes->getType(), /*isConstant=*/true,
                                GlobalValue::PrivateLinkage, bytes,
                                "pipeforge_program");
  gv->setAlignment(Align(16));
  FunctionCallee entry = mod->getOrInsertFunction(
      "pipeforge_rt_main_embedded",
      FunctionType::get(i32, {i32, ptr, ptr, i64}, false));
  Function *mainFn =
      Function::Create(FunctionType::get(i32, {i32, ptr}, false),
                       GlobalValue::ExternalLinkage, "main", *mod);
  IRBuilder<> b(BasicBlock::Create(ctx, "entry", mainFn));
  Value *argc = mainFn->getArg(0), *argv = mainFn->getArg(1);
  Value *r = b.CreateCall(
      entry, {argc, argv, gv, ConstantInt::get(i64, program.size())});
  b.CreateRet(r);
  return mod;
}

} // namespace

Error emitExecutable(StringRef program, StringRef outPath,
                     const ExecutableOptions &o) {
  InitializeNativeTarget();
  InitializeNativeTargetAsmPrinter();
  LLVMContext ctx;
  std::unique_ptr<Module> mod = buildModule(ctx, program);
  std::string verifyErr;
  raw_string_ostream vos(verifyErr);
  if (verifyModule(*mod, &vos))
    return createStringError("internal error: the executable's module does "
                             "not verify: " +
                             verifyErr);

  Triple triple(sys::getDefaultTargetTriple());
  std::string err;
  const Target *target = TargetRegistry::lookupTarget(triple, err);
  if (!target)
    return createStringError("--emit exe: no target for '" + triple.str() +
                             "': " + err);
  TargetOptions topts;
  std::unique_ptr<TargetMachine> tm(
      target->createTargetMachine(triple, "generic", "", topts, Reloc::PIC_));
  if (!tm)
    return createStringError("--emit exe: cannot create a target machine "
                             "for '" +
                             triple.str() + "'");
  mod->setTargetTriple(triple);
  mod->setDataLayout(tm->createDataLayout());

  // The object file, in a temporary next to nothing the user owns.
  SmallString<128> obj;
  int fd = -1;
  if (std::error_code ec =
          sys::fs::createTemporaryFile("pipeforge-exe", "o", fd, obj))
    return createStringError("--emit exe: cannot create a temporary object "
                             "file: " +
                             ec.message());
  FileRemover removeObj(obj);
  {
    raw_fd_ostream os(fd, /*shouldClose=*/true);
    legacy::PassManager pm;
    if (tm->addPassesToEmitFile(pm, os, nullptr, CodeGenFileType::ObjectFile))
      return createStringError("--emit exe: the target cannot emit an "
                               "object file");
    pm.run(*mod);
    os.close();
    if (os.has_error())
      return createStringError("--emit exe: error writing '" + obj.str() +
                               "': " + os.error().message());
  }

  // Link with the system C++ driver against the runtime library.
  std::string lib =
      (Twine(o.runtimeLibDir) + "/" + kRuntimeDriverLibrary).str();
  if (!sys::fs::exists(lib))
    return createStringError("--emit exe: the runtime library '" + lib +
                             "' does not exist (build the target "
                             "pipeforge-rt-driver, or give --runtime-lib-dir)");
  auto linker = sys::findProgramByName(o.linker);
  if (!linker)
    return createStringError("--emit exe: the linker '" + o.linker +
                             "' is not on PATH");
  std::vector<std::string> args = {*linker,
                                   obj.str().str(),
                                   "-o",
                                   outPath.str(),
                                   "-L" + o.runtimeLibDir,
                                   "-lpipeforge-rt-driver",
                                   "-Wl,-rpath," + o.runtimeLibDir};
  std::vector<StringRef> argRefs(args.begin(), args.end());
  std::string execErr;
  int rc =
      sys::ExecuteAndWait(*linker, argRefs, std::nullopt, {}, 0, 0, &execErr);
  if (rc != 0) {
    std::string cmd;
    for (const std::string &a : args)
      cmd += (cmd.empty() ? "" : " ") + a;
    return createStringError(
        "--emit exe: linking failed (exit " + std::to_string(rc) +
        (execErr.empty() ? "" : ": ") + execErr + "): " + cmd);
  }
  return Error::success();
}

std::string findRuntimeLibDir(const char *argv0, void *mainAddr) {
  std::string exe = sys::fs::getMainExecutable(argv0, mainAddr);
  if (exe.empty())
    return "";
  SmallString<256> dir(sys::path::parent_path(sys::path::parent_path(exe)));
  sys::path::append(dir, "lib");
  SmallString<256> lib(dir);
  sys::path::append(lib, kRuntimeDriverLibrary);
  return sys::fs::exists(lib) ? std::string(dir) : std::string();
}

} // namespace pipeforge::target
