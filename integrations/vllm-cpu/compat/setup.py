"""Puts vllm_cpu_compat.pth at the root of the wheel (site-packages), so the interpreter runs the hook at start-up."""
import os

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPyWithPth(build_py):
    def run(self):
        super().run()
        self.copy_file("vllm_cpu_compat.pth", os.path.join(self.build_lib, "vllm_cpu_compat.pth"))


setup(cmdclass={"build_py": BuildPyWithPth})
