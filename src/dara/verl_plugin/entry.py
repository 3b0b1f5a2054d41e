"""Target of the ``verl.plugins`` entry point: verl imports this module (it does not call anything), so the
import itself registers the plugin."""

from dara.verl_plugin import register

register()
