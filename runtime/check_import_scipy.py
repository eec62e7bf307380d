"""paddle.check_import_scipy: on Windows ('nt'), turn scipy's 'DLL load failed' ImportError into
one that says which redistributable is missing (Paddle 1.8's import-time check)."""


def check_import_scipy(os_name):
    if os_name != "nt":
        return
    try:
        import scipy.io  # noqa: F401
    except ImportError as err:
        if "DLL load failed" in str(err):
            raise ImportError(f"{err}\nplease install the Visual C++ Redistributable for "
                              f"Visual Studio 2015") from err
